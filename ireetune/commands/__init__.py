"""Subcommands of the `ireetune` command line, one module each.

Each module defines `register(subparsers)`, which adds its parser and sets `handler` (a function
from the parsed arguments to an exit status) as a default. A command declares its options once, as
an options dataclass (core/options.py), and `shared.add_command` generates its parser and hands
its handler those options; the tuning commands (tune, tune-dispatch) use
`shared.add_tuning_command`, which adds the executor's arguments and builds their options with
`read_tuning_options`; report, which adds hand-written arguments after the declared ones, uses
`shared.add_options_parser`. The list below is the whole registry.
"""

COMMAND_MODULES = (
    "ireetune.commands.tune",
    "ireetune.commands.tune_dispatch",
    # The two verbs that continue a run: `continue` on the compile host, `measure` on the device
    # host (each module also keeps the older names, for old scripts).
    "ireetune.commands.continue_run",
    "ireetune.commands.measure",
    "ireetune.commands.replay",
    "ireetune.commands.db",
    "ireetune.commands.ranker",
    "ireetune.commands.spec",
    "ireetune.commands.compile",
    "ireetune.commands.profile",
    "ireetune.commands.report",
)
