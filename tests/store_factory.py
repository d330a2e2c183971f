"""A user-style SessionStore factory for the ``--store module:factory`` test: any object with the SDK
protocol will do; this one keeps its SQLite file where FLOWER_TEST_STORE says."""

import os

import flower


def make():
    return flower.SqliteSessionStore(os.environ["FLOWER_TEST_STORE"])


def broken():
    return object()
