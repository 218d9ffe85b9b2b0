"""OpenRLHF 0.11.2's own argument parser and argument checks, run without importing its CLI.

`openrlhf/cli/train_ppo_ray.py` builds its parser and checks its arguments inside
`if __name__ == "__main__":`, and importing the module needs Ray, vLLM and DeepSpeed. So the
`__main__` block is read from the installed source and executed with the final `train(args)`
call removed: the flags, types, choices and every CPU-checkable assert are OpenRLHF's own.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import os
import re
from datetime import datetime
from difflib import get_close_matches
from functools import lru_cache
from pathlib import Path

# The parser's block imports openrlhf.utils, which needs pylatexenc (sympy comes with torch); openrlhf's own pins
# (CUDA vLLM, a fixed transformers) would replace the CPU install, hence --no-deps.
INSTALL_HINT = (
    "pip install 'asearcher-plugin[train]' on a GPU machine; to check recipes only: "
    "pip install --no-deps openrlhf==0.11.2 pylatexenc"
)


class RecipeFlagError(ValueError):
    """`flag` (e.g. `rollout.batch_size`, no dashes) when OpenRLHF's message names one."""

    def __init__(self, message: str, flag: str | None = None):
        super().__init__(f"--{flag}: {message}" if flag else message)
        self.message, self.flag = message, flag


def train_ppo_ray_source() -> Path:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise RecipeFlagError(f"openrlhf is not installed; it comes with the [train] extra: {INSTALL_HINT}")
    return Path(list(spec.submodule_search_locations)[0]) / "cli" / "train_ppo_ray.py"


def _main_block(source: str) -> ast.Module:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            body = [n for n in node.body if not _calls(n, "train") and not _uses(n, "use_ms")]
            return ast.Module(body=body, type_ignores=[])
    raise RecipeFlagError("no __main__ block in train_ppo_ray.py: unexpected OpenRLHF version")


def _calls(node: ast.stmt, name: str) -> bool:
    return (
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == name
    )


def _uses(node: ast.stmt, attr: str) -> bool:
    return isinstance(node, ast.If) and attr in ast.unparse(node.test)


def known_flags() -> dict[str, argparse.Action]:
    return dict(_known_flags(train_ppo_ray_source().read_text()))


@lru_cache(maxsize=2)
def _known_flags(source: str) -> tuple:
    parser = _parser(source)
    return tuple((opt, action) for action in parser._actions for opt in action.option_strings)


def flag_problems(flags: dict) -> list[RecipeFlagError]:
    """Names that are not OpenRLHF flags, and switches given a value: argparse would blame the value, not the flag."""
    known = known_flags()
    problems = []
    for name, value in flags.items():
        action = known.get(f"--{name}")
        if action is None:
            close = get_close_matches(f"--{name}", list(known), n=1)
            hint = f" (did you mean {close[0][2:]}?)" if close else ""
            problems.append(RecipeFlagError(f"not a flag of OpenRLHF 0.11.2{hint}", name))
        elif action.nargs == 0 and not isinstance(value, bool) and value is not None:
            problems.append(RecipeFlagError(f"a switch: give true or false, not {value!r}", name))
    return problems


def _namespace(**extra) -> dict:
    """The module globals the __main__ block uses before it reaches `train()`."""
    return {"argparse": argparse, "datetime": datetime, "os": os, **extra}


def _parser(source: str) -> argparse.ArgumentParser:
    block = _main_block(source)
    cut = next(
        i for i, n in enumerate(block.body) if isinstance(n, ast.Assign) and "parse_args" in ast.unparse(n.value)
    )
    ns = _namespace()
    exec(compile(ast.Module(body=block.body[:cut], type_ignores=[]), "train_ppo_ray.py", "exec"), ns)
    return ns["parser"]


def check_args(argv: list[str]):
    """Parses `argv` with OpenRLHF's parser and runs its post-parse checks; returns the hierarchical args."""
    block = _main_block(train_ppo_ray_source().read_text())
    ns = _namespace(__name__="recipe_check", __argv__=list(argv))
    code = ast.unparse(block).replace("parser.parse_args()", "parser.parse_args(__argv__)")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "train_ppo_ray.py", "exec"), ns)
    except SystemExit:
        raise _parse_error(err.getvalue()) from None
    except AssertionError as exc:
        raise RecipeFlagError(f"OpenRLHF refuses these arguments: {exc}") from None
    except ModuleNotFoundError as exc:  # openrlhf installed without the modules its parser's block imports
        raise RecipeFlagError(f"OpenRLHF's parser needs {exc.name}, not installed: {INSTALL_HINT}") from None
    except Exception as exc:  # noqa: BLE001 - OpenRLHF's own post-parse code tripping on the combination
        raise RecipeFlagError(f"OpenRLHF's argument handling failed: {type(exc).__name__}: {exc}") from None
    return ns["args"]


def _parse_error(stderr: str) -> RecipeFlagError:
    """argparse's last line without its `prog: error:` prefix, and the flag it names."""
    line = stderr.strip().splitlines()[-1] if stderr.strip() else "invalid flags"
    line = re.sub(r"^.*?: error: ", "", line)
    if m := re.match(r"argument (--\S+?)(?:/\S+)?: (.*)", line):
        return RecipeFlagError(m.group(2), m.group(1)[2:])
    if m := re.match(r"unrecognized arguments: (--\S+)", line):
        return RecipeFlagError("not a flag of OpenRLHF 0.11.2", m.group(1)[2:])
    return RecipeFlagError(line)
