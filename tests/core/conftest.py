"""Hypothesis profiles for the routing tests: modest by default, bigger with HYPOTHESIS_PROFILE=thorough."""

import os

from hypothesis import settings

settings.register_profile("core-ci", max_examples=150, deadline=None)
settings.register_profile("thorough", max_examples=3000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "core-ci"))
