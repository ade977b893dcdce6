"""``bide serve``'s token file (issue 18, item 4): created owner-only with a random token,
refused when others could read or replace it; and the message without the extra."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import bide
import pytest
from bide.engine.serve.token import load_token


def test_a_missing_token_file_is_created_owner_only_with_a_random_token(tmp_path):
    path = tmp_path / "serve.token"
    token = load_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 40 and path.read_text().strip() == token
    assert load_token(path) == token  # read again, not replaced
    assert load_token(tmp_path / "other.token") != token
    assert sorted(os.listdir(tmp_path)) == ["other.token", "serve.token"]  # no temp files left


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644])
def test_a_token_file_others_can_use_is_refused_and_left_as_it_is(tmp_path, mode):
    path = tmp_path / "serve.token"
    path.write_text("s" * 43 + "\n")
    path.chmod(mode)
    with pytest.raises(bide.ServeError, match=f"open to others .mode 0{mode:o}.*chmod 600"):
        load_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == mode and path.read_text() == "s" * 43 + "\n"


def test_a_symlink_a_directory_or_a_short_token_is_refused(tmp_path):
    real = tmp_path / "real.token"
    real.write_text("s" * 43)
    real.chmod(0o600)
    (tmp_path / "link.token").symlink_to(real)
    (tmp_path / "dir.token").mkdir()
    short = tmp_path / "short.token"
    short.write_text("abc\n")
    short.chmod(0o600)
    spaced = tmp_path / "spaced.token"
    spaced.write_text("s" * 20 + " " + "s" * 20)
    spaced.chmod(0o600)
    accented = tmp_path / "accented.token"
    accented.write_text("é" * 20)
    accented.chmod(0o600)
    for name, why in (("link.token", "not a regular file"), ("dir.token", "not a regular"),
                      ("short.token", "at least 16"), ("spaced.token", "without spaces"),
                      ("accented.token", "ASCII")):
        with pytest.raises(bide.ServeError, match=why):
            load_token(tmp_path / name)


def test_serve_without_the_extra_exits_2_saying_what_to_install(tmp_path):
    code = ("import sys\n"
            "sys.modules['starlette'] = None  # as if bide[serve] were not installed\n"
            "sys.modules['uvicorn'] = None\n"
            "from bide.cli import main\n"
            "main()\n")
    app = tmp_path / "app.py"
    app.write_text("import bide\nflow = bide.Flow('f')\n"
                   "@flow.node(start=True)\ndef one(state, ctx):\n    return {}\n")
    done = subprocess.run([sys.executable, "-c", code, "serve", "--home", str(tmp_path / "h"),
                           "--app", "app:flow", "--port", "0"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "pip install 'bide[serve]'" in done.stderr
    assert not (tmp_path / "h").exists()  # it stopped before making anything


def test_a_token_file_that_cannot_be_made_is_a_clear_error(tmp_path):
    with pytest.raises(bide.ServeError, match="cannot create the token file"):
        load_token(tmp_path / "missing" / "serve.token")
