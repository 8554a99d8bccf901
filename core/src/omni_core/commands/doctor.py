"""`omni doctor`: what this machine can run, and why not where it cannot.

It selects the platform exactly as a generation would (so a forced ``OMNI_PLATFORM`` that is unknown
or unavailable fails here the same way: one line, non-zero exit), then checks every registered
platform, attention backend, cache backend and quantizer against it, and lists what model
plugins told the core: the denoiser classes they describe and their benchmark workloads (each
with whether it can be used: its implementation module is there, its pipeline is registered).
"""

from __future__ import annotations

import json
import platform as py_platform
import sys
from importlib import metadata
from typing import Any

import click

from omni_core.commands.config_files import config_from_cli, config_options
from omni_core.contract.registry import Availability, QuantizerSpec, load_object

#: Distributions whose versions decide what runs (read from metadata: no import needed).
VERSION_PACKAGES = ("omni-core", "torch", "diffusers", "transformers", "pluggy", "pydantic")


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def check_reference(reference: str | None) -> Availability:
    """Run a lazy ``"module:func"`` availability check; one that raises means 'not usable'."""
    if reference is None:
        return Availability.yes()
    try:
        result = load_object(reference)()
    except Exception as exc:  # noqa: BLE001 - a broken check must not take doctor down
        return Availability.no(f"availability check failed: {type(exc).__name__}: {exc}")
    if isinstance(result, Availability):
        return result
    return Availability(available=bool(result), reason="" if result else "check said no")


def module_availability(reference: str) -> Availability:
    """Whether the module of a lazy ``"module:attr"`` reference exists (found, not imported)."""
    import importlib.util

    module = reference.partition(":")[0]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError) as exc:
        return Availability.no(f"cannot look up {module}: {type(exc).__name__}: {exc}")
    return Availability.yes() if found else Availability.no(f"module {module} is not installed")


def _usable(availability: Availability) -> dict[str, Any]:
    return {"usable": availability.available, "reason": availability.reason}


def compatibility_rows(compatibility: dict[str, str]) -> list[dict[str, Any]]:
    """Each ``{"torch": ">=2.4"}`` requirement with the installed version and whether it fits."""
    rows = []
    for distribution, requirement in compatibility.items():
        installed = installed_version(distribution)
        satisfied: bool | None = None
        if installed is not None:
            try:
                from packaging.specifiers import InvalidSpecifier, SpecifierSet
                from packaging.version import InvalidVersion, Version

                try:
                    satisfied = Version(installed) in SpecifierSet(requirement)
                except (InvalidSpecifier, InvalidVersion):
                    satisfied = None
            except ImportError:  # packaging is not a dependency of omni-core
                satisfied = None
        rows.append(
            {
                "distribution": distribution,
                "requires": requirement,
                "installed": installed,
                "satisfied": satisfied,
            }
        )
    return rows


def collect(config_file: str | None = None, config_set: tuple[str, ...] = ()) -> dict[str, Any]:
    """The whole report as a JSON-able dict. Raises OmniError for a bad forced platform/config."""
    from omni_core.contract.attention import ROLES, backend_availability, resolve_backend
    from omni_core.contract.errors import OmniError, PlatformError
    from omni_core.contract.host import get_host
    from omni_core.contract.platforms import check_available, select_platform

    config = config_from_cli(config_file, config_set)
    host = get_host()
    registry = host.registry
    report: dict[str, Any] = {
        "python": f"{py_platform.python_version()} ({sys.executable})",
        "versions": {name: installed_version(name) for name in VERSION_PACKAGES},
    }
    try:
        selection = select_platform(registry)
    except PlatformError:
        import os

        if os.environ.get("OMNI_PLATFORM"):
            raise  # forced but unknown/unavailable: the CLI prints one line and exits non-zero
        selection = None
        report["selected_platform"] = None
        report["selection_error"] = str(sys.exc_info()[1])
    device_type = "cpu"
    if selection is not None:
        device_type = selection.platform.device_type
        report["selected_platform"] = {
            "name": selection.spec.name,
            "reason": selection.reason,
            **selection.platform.describe(),
        }
        report["selection_error"] = None

    report["platforms"] = []
    for spec in sorted(registry.platforms.values(), key=lambda s: (-s.priority, s.name)):
        availability = check_available(spec)
        report["platforms"].append(
            {
                "name": spec.name,
                "plugin": spec.plugin,
                "priority": spec.priority,
                "device_type": spec.device_type,
                "usable": availability.available,
                "reason": availability.reason,
                "compatibility": compatibility_rows(spec.compatibility),
            }
        )
    report["attention_backends"] = []
    for spec in sorted(registry.attention_backends.values(), key=lambda s: s.name):
        availability = backend_availability(spec, device_type)
        report["attention_backends"].append(
            {
                "name": spec.name,
                "plugin": spec.plugin,
                "device_types": list(spec.device_types),
                "usable": availability.available,
                "reason": availability.reason,
            }
        )
    routes: dict[str, Any] = {}
    if selection is not None:
        for role in ROLES:
            configured = config.attention.for_role(role)
            try:
                routes[role] = {
                    "configured": configured,
                    "backend": resolve_backend(configured, registry, selection.platform).name,
                    "error": None,
                }
            except OmniError as exc:
                routes[role] = {"configured": configured, "backend": None, "error": str(exc)}
    report["attention_routing"] = routes
    for kind in ("cache_backends", "quantizers"):
        rows = []
        for spec in sorted(registry.kind(kind).values(), key=lambda s: s.name):
            # quantizers name the devices they run on; cache backends run on any
            device_types = spec.device_types if isinstance(spec, QuantizerSpec) else None
            if device_types is not None and device_type not in device_types:
                availability = Availability.no(
                    f"runs on {', '.join(device_types)}, not on {device_type}"
                )
            else:
                availability = check_reference(spec.availability)
            rows.append(
                {
                    "name": spec.name,
                    "plugin": spec.plugin,
                    "lossy": spec.lossy,
                    "usable": availability.available,
                    "reason": availability.reason,
                }
            )
        report[kind] = rows
    report["denoisers"] = [
        {
            "name": spec.name,
            "plugin": spec.plugin,
            "architectures": list(spec.architectures),
            **_usable(module_availability(spec.implementation)),
        }
        for spec in sorted(registry.denoisers.values(), key=lambda s: s.name)
    ]
    report["benchmarks"] = []
    for spec in sorted(registry.benchmarks.values(), key=lambda s: s.name):
        availability = module_availability(spec.implementation)
        if availability.available and spec.pipeline not in registry.pipelines:
            availability = Availability.no(f"pipeline {spec.pipeline!r} is not registered")
        report["benchmarks"].append(
            {
                "name": spec.name,
                "plugin": spec.plugin,
                "pipeline": spec.pipeline,
                "tiny": spec.tiny,
                **_usable(availability),
            }
        )
    report["pipelines"] = [
        {"name": s.name, "plugin": s.plugin, "tasks": list(s.tasks)}
        for s in sorted(registry.pipelines.values(), key=lambda s: s.name)
    ]
    report["plugins"] = {
        "ok": sorted(i.name for i in host.infos() if i.status == "ok"),
        "error": {i.name: i.error for i in host.infos() if i.status != "ok"},
    }
    return report


def _mark(usable: bool | None) -> str:
    return {True: "yes", False: "no", None: "?"}[usable]


def _cell(value: Any, *, usable: bool = False) -> str:
    if usable:
        return _mark(value)
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def render(report: dict[str, Any]) -> str:
    lines = [f"python        {report['python']}"]
    for name, version in report["versions"].items():
        lines.append(f"{name:<13} {version or 'not installed'}")
    selected = report["selected_platform"]
    lines.append("")
    if selected is None:
        lines.append(f"platform: none selected ({report['selection_error']})")
    else:
        lines.append(f"platform: {selected['name']} ({selected['reason']})")
        lines.append(
            f"  devices: {selected['device_count']} x {', '.join(selected['devices']) or '-'}; "
            f"distributed backend: {selected['dist_backend']}; "
            f"dtypes: {', '.join(selected['supported_dtypes'])}"
        )
    sections = (
        ("platforms", "platforms", ("name", "plugin", "priority", "usable", "reason")),
        ("attention backends", "attention_backends", ("name", "plugin", "usable", "reason")),
        ("cache backends", "cache_backends", ("name", "plugin", "lossy", "usable", "reason")),
        ("quantizers", "quantizers", ("name", "plugin", "lossy", "usable", "reason")),
        ("denoisers", "denoisers", ("name", "plugin", "architectures", "usable", "reason")),
        ("benchmarks", "benchmarks", ("name", "plugin", "pipeline", "tiny", "usable", "reason")),
    )
    for title, key, columns in sections:
        lines += ["", f"{title}:"]
        if not report[key]:
            lines.append("  (none registered)")
            continue
        rows = [tuple(c.upper() for c in columns)]
        for item in report[key]:
            rows.append(tuple(_cell(item[c], usable=c == "usable") for c in columns))
        lines += _table(rows)
    lines += ["", "platform compatibility:"]
    for item in report["platforms"]:
        if not item["compatibility"]:
            lines.append(f"  {item['name']}: no requirements declared")
            continue
        cells = []
        for row in item["compatibility"]:
            if row["installed"] is None:
                state = "not installed"
            else:
                verdict = {True: "ok", False: "MISMATCH", None: "unchecked"}[row["satisfied"]]
                state = f"installed {row['installed']}: {verdict}"
            cells.append(f"{row['distribution']} {row['requires']} ({state})")
        lines.append(f"  {item['name']}: " + "; ".join(cells))
    if report["attention_routing"]:
        lines += ["", "attention routing (from config):"]
        for role, route in report["attention_routing"].items():
            target = route["backend"] or f"ERROR: {route['error']}"
            lines.append(f"  {role:<6} {route['configured']} -> {target}")
    lines += ["", f"pipelines: {', '.join(p['name'] for p in report['pipelines']) or 'none'}"]
    broken = report["plugins"]["error"]
    lines.append(f"plugins: {len(report['plugins']['ok'])} ok, {len(broken)} broken")
    for name, error in broken.items():
        lines.append(f"  {name}: {error}")
    return "\n".join(lines)


@click.command("doctor")
@click.argument("model", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@config_options
def doctor(
    model: str | None, as_json: bool, config_file: str | None, config_set: tuple[str, ...]
) -> None:
    """Show the selected platform and why, devices, versions and what is usable here.

    With MODEL (a folder or a cached Hub id): also which pipeline serves it (a plugin's
    first-class pipeline or the generic adapter) and which denoiser specs describe it.
    """
    report = collect(config_file, config_set)
    if model is not None:
        from omni_core.commands.doctor_model import model_route, render_route
        from omni_core.contract.host import get_registry

        report["model"] = model_route(get_registry(), model)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        text = render(report)
        if model is not None:
            text += "\n\n" + "\n".join(render_route(report["model"]))
        click.echo(text)
    if report["selected_platform"] is None:
        sys.exit(1)
