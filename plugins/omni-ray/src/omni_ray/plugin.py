"""omni plugin entry point of omni-ray: adds ``omni deploy ray`` (``omni_register_commands``).

Nothing here imports ray: the command imports it when it runs, so ``omni --help`` and ``omni
list-plugins`` stay fast.
"""

from __future__ import annotations

import click

from omni_core import PLUGIN_API_VERSION, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def omni_register_commands(cli: click.Group) -> None:
    from omni_ray.commands import deploy, deploy_ray

    existing = cli.commands.get("deploy")
    if isinstance(existing, click.Group):  # another plugin's `omni deploy`: join it
        existing.add_command(deploy_ray)
    else:
        cli.add_command(deploy)
