"""Helpers the tests share: builders of inputs, lab evidence, terminals, XML lookups (imported as tests.support.*)."""
