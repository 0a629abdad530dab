"""The miniature URMA harness tree is run by its lab test (a pytest of its own), never collected
here."""

collect_ignore = ["mini_umdk"]
