# ruff: noqa - written as a harness suite's public.py is
import logging

from app.mini.mini_feature import MiniFeature

log = logging.getLogger()


class UBUSFeature(MiniFeature):

    def setup(self):
        super(UBUSFeature, self).setup()

    def teardown(self):
        super(UBUSFeature, self).teardown()
