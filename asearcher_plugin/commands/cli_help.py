"""How `asearcher ... --help` shows options: a flag takes no value, so it shows no type.

Typer's rich help gives every option a type column, flags included (`--keep-serving <bool>` reads as if the flag took
a value); its plain help leaves flags out of it, as click does. The rich help is kept (its panels and colours) and
given the plain help's rule.
"""

from __future__ import annotations

from typer.core import TyperOption


def show_flags_without_type() -> None:
    if getattr(TyperOption.display_type_rich, "_flags_bare", False):
        return
    typed = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        return None if self.is_flag or self.count else typed(self, ctx)

    display_type_rich._flags_bare = True
    TyperOption.display_type_rich = display_type_rich
