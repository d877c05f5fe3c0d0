"""Fixtures for the model tests."""
import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_thread_here(one_thread):
    """Every test in this folder runs on one torch thread (tests/conftest.py's ``one_thread``)."""
    yield
