import json
import subprocess
import sys

import pytest


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_env_check_json_reports_all_passing():
    res = _cli("env", "check", "--env", "bfcl", "--split", "multi_turn_base", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["passed"] == out["total"] == 200


@pytest.mark.slow
def test_env_list_and_bad_split():
    assert "bfcl" in _cli("env", "list").stdout
    res = _cli("env", "check", "--split", "multi_turn_nope")
    assert res.returncode == 2 and "unknown BFCL category" in res.stderr and "Traceback" not in res.stderr


def test_scienceworld_missing_is_a_clear_error():
    from evolvekit.env.scienceworld import scienceworld_available

    reason = scienceworld_available()
    if reason is None:  # installed here: building it must work
        from evolvekit.env.registry import make_env

        make_env("scienceworld").close()
    else:
        import pytest

        from evolvekit.env.registry import make_env
        from evolvekit.errors import EnvError

        with pytest.raises(EnvError, match="ScienceWorld unavailable"):
            make_env("scienceworld")


def test_version_prints_the_package_version_and_the_code_commit():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "evolvekit.cli.main", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("evolvekit 0.") and "(" in out.stdout, out


def test_an_unregistered_environment_names_env_plugins():
    """Issue 54 (7): without env.plugins the error said the environment "registers no task source"; it now says
    the name is unknown and how a plugin environment is named."""
    from evolvekit.config import EnvConfig
    from evolvekit.env.registry import env_tasks
    from evolvekit.errors import EnvError

    with pytest.raises(EnvError, match=r"unknown environment 'my_env' \(env\.name\).*named in env\.plugins"):
        env_tasks(EnvConfig(name="my_env"), "train")
