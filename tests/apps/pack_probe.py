"""Packed beside the app by tests/test_pack.py and run as the zipapp's entry point
(SHIV_ENTRY_POINT=pack_probe:main): where each module bide needs was loaded from."""

import importlib
import json


def main():
    names = ["bide", "msgspec", "lmdb", "watchfiles", "click", "cronsim", "follow_app"]
    print(json.dumps({n: importlib.import_module(n).__file__ for n in names}))
