"""One option vocabulary across commands: a short flag means the same long option everywhere, and the
names for one thing are the same in every command that takes it."""

from __future__ import annotations

from collections.abc import Iterator

import click

from easlurm.cli import cli, output_options


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command below `group` (subcommands are loaded lazily: ask the group)."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        path = f"{prefix} {name}".strip()
        if isinstance(cmd, click.Group):
            yield from commands(cmd, path)
        else:
            yield path, cmd


def options() -> Iterator[tuple[str, click.Option]]:
    for path, cmd in commands(cli):
        for param in cmd.params:
            if isinstance(param, click.Option):
                yield path, param


def test_a_short_flag_means_one_long_option_everywhere() -> None:
    meaning: dict[str, dict[str, str]] = {}
    for path, opt in options():
        shorts = [o for o in opt.opts if len(o) == 2]
        longs = [o for o in opt.opts if o.startswith("--")]
        for short in shorts:
            meaning.setdefault(short, {})[path] = longs[0]
    clashes = {s: by for s, by in meaning.items() if len(set(by.values())) > 1}
    assert not clashes, clashes
    assert set(meaning["-o"].values()) == {"--format"} and set(meaning["-O"].values()) == {"--out"}


def test_parsable_flags_say_what_sacct_says() -> None:
    """-P is sacct's --parsable2 (no delimiter after the last field) in every command that prints a table;
    -p and --parsable (a delimiter after every field) belong to `easlurm sacct` alone, as in sacct."""
    by_short: dict[str, set[tuple[str, str]]] = {"-p": set(), "-P": set(), "--parsable": set()}
    for path, opt in options():
        longs = [o for o in opt.opts if o.startswith("--")]
        for flag in by_short:
            if flag in opt.opts:
                by_short[flag].add((path, longs[0]))
    assert by_short["-p"] == {("sacct", "--parsable")} and by_short["--parsable"] == by_short["-p"]
    assert {long for _, long in by_short["-P"]} == {"--parsable2"}
    assert {"sacct", "predict", "profile"} <= {path.split()[-1] for path, _ in by_short["-P"]}


def test_the_same_thing_has_the_same_name() -> None:
    """Every command that takes a power budget, an oracle noise, parameters to start from or an output
    directory spells it the same way (older spellings may stay as second names)."""
    by_path = {(path, o) for path, opt in options() for o in (*opt.opts, *opt.secondary_opts)}
    assert ("sim run", "--power-budget") in by_path and ("schedd", "--power-budget") in by_path
    assert ("sim replay", "--power-budget") in by_path
    assert ("sim run", "--noise-sigma") in by_path and ("sim replay", "--noise-sigma") in by_path
    assert ("model calibrate", "--params") in by_path and ("model calibrate-pairs", "--params") in by_path
    for path in ("sim campaign", "sim replay", "model evaluate", "model calibrate", "profile"):
        assert (path, "-O") in by_path, path
    assert ("sim replay", "--no-html") in by_path and ("sim report", "--no-html") in by_path


def test_output_options_are_spelled_once() -> None:
    """-o/-P/-n/--json come from one decorator (easlurm.cli.output_options): the same destinations and, for
    -P and -n, the same help in every command; sacct keeps -p/--delimiter beside them as sacct does."""

    @output_options(["A", "B"])
    def probe(**kwargs: object) -> None: ...

    shared = {opt.opts[0]: opt for opt in click.command()(probe).params if isinstance(opt, click.Option)}
    assert set(shared) == {"-o", "-P", "-n", "--json"}
    seen: set[str] = set()
    for path, opt in options():
        for flag in set(opt.opts) & set(shared):
            seen.add(path)
            assert (path, opt.name) == (path, shared[flag].name)
            if flag in ("-P", "-n"):
                assert (path, opt.help) == (path, shared[flag].help)
    assert {"sacct", "predict", "profile", "power report", "model evaluate"} <= seen
