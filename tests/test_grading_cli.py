"""`mha-grade <command>`: each command dispatched to its module's main(argv), lazily; a command
whose module is missing says so plainly instead of a traceback."""

import importlib.util
import subprocess
import sys

import pytest

from mha_grade import cli


def test_every_command_names_a_module_with_a_main_or_says_it_is_missing(capsys):
    for name, (module, _) in cli.COMMANDS.items():
        if importlib.util.find_spec(module) is None:
            assert cli.main([name]) == 2
            assert f"the command {name!r} is not available" in capsys.readouterr().err
        else:
            assert callable(importlib.import_module(module).main)


def test_unknown_commands_and_no_command_print_the_usage(capsys):
    assert cli.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'nope'" in err and "grade" in err and "gradescope" in err
    assert cli.main([]) == 2 and "usage: mha-grade <command>" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["grade", "gradescope"])
def test_the_console_command_reaches_each_commands_options(command):
    run = subprocess.run([sys.executable, "-m", "mha_grade", command, "-h"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and f"usage: mha-grade {command}" in run.stdout
