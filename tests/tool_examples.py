"""Tools of a user's own, as `tools.extra` names them (the calculator is the one docs/tools.md shows)."""

import ast
import operator
import time

from asearcher_plugin.tools import ToolUnavailable

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (numbers, + - * / ** and parentheses) and return its value."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")

    result = value(ast.parse(expression, mode="eval").body)
    return str(int(result) if float(result).is_integer() else result)


def never_in_time() -> str:
    """A lookup that takes longer than its deadline."""
    time.sleep(2)
    return "late"


never_in_time.deadline = 0.2


def unit_price(total: float, count: int = 1) -> dict:
    """Price of one unit."""
    return {"unit": total / count}


def rates() -> str:
    """Today's exchange rates."""
    raise ToolUnavailable("the rates service answered 503")


def slow() -> str:
    """A lookup with no deadline of its own: tools.call_deadline applies."""
    time.sleep(2)
    return "late"
