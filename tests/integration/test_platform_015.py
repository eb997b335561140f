"""Platform API 0.15 through the real CLI: the platform's system buildpacks (``-system``, system.toml) and each
buildpack's execution environments (``[buildpack] exec-env``, ``CNB_EXEC_ENV``), as the lifecycle's detector
applies them (docs/detector.md), in what a run refuses, writes, says and reports."""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from preparer import Inputs, plan_run, prepare, run_plan
from preparer.errors import InvalidInputsError
from tests.buildpacks import buildpack_toml
from tests.golden import Layout
from tests.integration.test_targets import local, refused_and_untouched, untouched
from tests.plugins.cli import Result
from tests.projects import group

SYSTEM = """[system]
[[system.pre.buildpacks]]
id = "sys/pre"
version = "1.0.0"
{optional}
[[system.post.buildpacks]]
id = "sys/post"
version = "1.0.0"
"""


def installed(layout: Layout, bp_id: str, extra: str = "", version: str = "1.0.0") -> None:
    """A Buildpack API 0.12 buildpack in ``<buildpacks>``, its buildpack.toml ending with ``extra``."""
    local(layout.buildpacks / bp_id.replace("/", "_") / version, bp_id, extra, version, api="0.12")


def system_toml(layout: Layout, optional: bool = False) -> Path:
    path = layout.root / "system.toml"
    path.write_text(SYSTEM.format(optional="optional = true" if optional else ""))
    return path


def report(layout: Layout) -> dict[str, Any]:
    return tomllib.loads((layout.root / "report.toml").read_text())


def groups(layout: Layout) -> list[list[tuple[str, str, bool]]]:
    """The report's groups: each buildpack's ``id@version``, where it came from and whether it runs."""
    return [
        [(f"{bp['id']}@{bp['version']}", bp["from"], bp["runs"]) for bp in found["buildpacks"]]
        for found in report(layout)["groups"]
    ]


def run(preparer: Callable[..., Result], layout: Layout, *flags: str, **kwargs: Any) -> Result:
    return preparer(*flags, "-prepare-report", str(layout.root / "report.toml"), **kwargs)


@pytest.fixture
def app(layout: Layout) -> str:
    """A project whose group fetches one buildpack (./app-bp, no exec-env) and names one of the builder's."""
    local(layout.app / "app-bp", "me/app", api="0.12")
    return group("./app-bp", "urn:cnb:builder:examples/node@1.2.0")


def test_system_buildpacks_present_are_merged_around_the_group_and_order_toml_stays_the_projects(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    installed(layout, "sys/pre")
    installed(layout, "sys/post")
    system = system_toml(layout)
    dry = preparer("-system", str(system), "-dry-run", project=app)
    assert dry.code == 0, dry.stderr
    assert (
        f"  system buildpacks: {system}: before every group sys/pre@1.0.0; after sys/post@1.0.0\n"
        "  detector group: sys/pre@1.0.0 (system.toml), ./app-bp (project; read once fetched), "
        "examples/node@1.2.0 (project), sys/post@1.0.0 (system.toml)\n"
    ) in dry.stdout
    result = run(preparer, layout, "-system", str(system), project=app)
    assert result.code == 0, result.stderr
    assert result.warnings == []
    # The detector merges them itself: the order written is the project's group.
    written = tomllib.loads((layout.layers / "order.toml").read_text())
    assert [e["id"] for e in written["order"][0]["group"]] == ["me/app", "examples/node"]
    assert groups(layout) == [
        [
            ("sys/pre@1.0.0", "system.toml", True),
            ("me/app@1.0.0", "project", True),
            ("examples/node@1.2.0", "project", True),
            ("sys/post@1.0.0", "system.toml", True),
        ]
    ]
    said = report(layout)
    assert said["system"] == {
        "path": str(system), "action": "merged", "pre": ["sys/pre@1.0.0"], "post": ["sys/post@1.0.0"]
    }  # fmt: skip
    assert said["exec-env"] == "production"


@pytest.mark.parametrize("optional", [False, True])
def test_a_system_buildpack_missing_is_refused_naming_it_the_file_and_what_to_do(
    preparer: Callable[..., Result], layout: Layout, app: str, optional: bool
) -> None:
    installed(layout, "sys/post")
    system = system_toml(layout, optional)
    before = untouched(layout)
    result = preparer("-system", str(system), project=app)
    refused_and_untouched(result, layout, before)
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to use system buildpack sys/pre@1.0.0: system.pre.buildpacks[0] of {system} names it, and "
        f"it is not in {layout.buildpacks}: the detector fails at start-up without it; install it into "
        f"{layout.buildpacks}, name a version it has in system.toml, or turn system buildpacks off for this build "
        '(-disable-system-buildpacks, and -system "" for the detector)'
    )
    # optional = true changes nothing: the lifecycle (v0.21) requires every system buildpack, and says so.
    assert any("optional = true" in w and "does not read" in w for w in result.warnings) is optional


def test_an_optional_system_buildpack_present_runs_as_required_with_a_warning(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    installed(layout, "sys/pre")
    installed(layout, "sys/post")
    result = run(preparer, layout, "-system", str(system_toml(layout, optional=True)), project=app)
    assert result.code == 0, result.stderr
    assert len(result.warnings) == 1
    assert (
        "sys/pre@1.0.0) has optional = true, which the lifecycle (v0.21) does not read" in result.warnings[0]
    )
    assert "optional" not in report(layout)["groups"][0]["buildpacks"][0]


def test_a_system_buildpack_of_another_version_only_is_refused_naming_what_is_there(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    installed(layout, "sys/pre", version="2.0.0")
    installed(layout, "sys/post")
    result = preparer("-system", str(system_toml(layout)), project=app)
    assert result.code == 1, result.stderr
    assert f"it is not in {layout.buildpacks}; {layout.buildpacks} has sys/pre 2.0.0:" in result.stderr


def test_disable_system_buildpacks_runs_without_them_and_says_what_the_detector_needs(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    system = system_toml(layout)  # neither is installed: turned off, neither is looked for
    result = run(preparer, layout, "-system", str(system), "-disable-system-buildpacks", project=app)
    assert result.code == 0, result.stderr
    assert f'give the detector -system "" too, or it merges those of {system} all the same' in result.stdout
    assert report(layout)["system"] == {"path": str(system), "action": "off"}
    assert groups(layout) == [[("me/app@1.0.0", "project", True), ("examples/node@1.2.0", "project", True)]]
    # The variable turns them off as the flag does.
    again = preparer(
        "-system", str(system), project=app, env={"CNB_PREPARER_DISABLE_SYSTEM_BUILDPACKS": "true"}
    )
    assert again.code == 0, again.stderr


def test_below_platform_0_15_system_is_a_warning_and_not_applied(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    system = system_toml(layout)  # its buildpacks are missing: not read, so not refused
    result = run(preparer, layout, "-system", str(system), project=app, env={"CNB_PLATFORM_API": "0.14"})
    assert result.code == 0, result.stderr
    assert result.warnings == [
        (
            f"Warning: the system buildpacks of {system} (-system, CNB_SYSTEM_PATH) are not applied: the detector "
            "reads system.toml from Platform API 0.15, and this build's is 0.14 (whose detector refuses a -system "
            "flag, and ignores CNB_SYSTEM_PATH)"
        )
    ]
    assert report(layout)["system"] == {"path": str(system), "action": "not applied"}
    assert (layout.layers / "order.toml").exists()


@pytest.mark.parametrize(
    ("values", "exec_env", "runs"),
    [
        ('["test"]', "test", True),
        ('["test", "production"]', "", True),
        ('["*"]', "production", True),
        ('["*"]', "development", True),
        ("[]", "test", True),
        ('["test"]', "production", False),
        ('["test"]', "", False),
        ('["Production"]', "production", False),
    ],
)
def test_a_project_buildpack_runs_or_is_skipped_on_its_exec_env(
    preparer: Callable[..., Result], layout: Layout, values: str, exec_env: str, runs: bool
) -> None:
    local(layout.app / "t", "me/t", f"exec-env = {values}\n", api="0.12")
    project = group("./t", "urn:cnb:builder:examples/node@1.2.0")
    env = {"CNB_EXEC_ENV": exec_env}
    result = run(preparer, layout, "-provenance", str(layout.layers / "prov.json"), project=project, env=env)
    assert result.code == 0, result.stderr
    build = exec_env or "production"
    assert report(layout)["exec-env"] == build
    assert groups(layout)[0][0] == ("me/t@1.0.0", "project", runs)
    provenance = json.loads((layout.layers / "prov.json").read_text())["predicate"]["buildDefinition"]
    notes = provenance["resolvedDependencies"][0]["annotations"]
    if runs:
        assert result.warnings == []
        assert "runs" not in notes
        return
    why = f"its exec-env = {values} does not hold {build}, this build's (CNB_EXEC_ENV)"
    if values == '["Production"]':  # the same word but for its case: said
        why += ", only Production, which the detector does not take for it (it compares them as written, case and all)"
    assert result.warnings == [
        (
            f"Warning: me/t@1.0.0 (project, io.buildpacks.group[0]) will not run: {why}; the detector skips it "
            "(set CNB_EXEC_ENV to one it lists to run it)"
        )
    ]
    assert report(layout)["groups"][0]["buildpacks"][0]["skipped"] == why
    # Installed all the same (the detector looks it up at start-up), and the provenance says it will not run.
    assert (layout.buildpacks / "me_t" / "1.0.0" / "buildpack.toml").is_file()
    assert notes["runs"] is False and notes["skipped"] == why
    # A dry run fetches nothing: it reads the buildpack.toml of what is installed (here, the copy just installed).
    dry = preparer("-dry-run", project=group("urn:cnb:builder:me/t@1.0.0", "./t"), env=env)
    assert f"    skips me/t@1.0.0 (project, io.buildpacks.group[0]): {why}\n" in dry.stdout


def test_a_group_every_buildpack_of_which_is_skipped_is_refused(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.app / "t", "me/t", 'exec-env = ["test"]\n', api="0.12")
    before = untouched(layout)
    result = preparer(project=group("./t"))
    refused_and_untouched(result, layout, before)
    error = result.stderr.splitlines()[-1]
    assert error.startswith(
        "ERROR: failed to prepare the group: the detector would skip every buildpack of the group"
    )
    assert 'me/t@1.0.0: its exec-env = ["test"] does not hold production' in error
    assert preparer(project=group("./t"), env={"CNB_EXEC_ENV": "test"}).code == 0


@pytest.mark.parametrize("where", ["project", "system"])
def test_the_specs_spelling_of_exec_env_is_refused_naming_the_lifecycles(
    preparer: Callable[..., Result], layout: Layout, app: str, where: str
) -> None:
    spec = '\n[[buildpack.exec-env]]\nname = "test"\n'
    flags: tuple[str, ...] = ()
    if where == "project":
        local(layout.app / "t", "me/t", spec, api="0.12")
        project = group("./t")
    else:
        installed(layout, "sys/pre", spec)
        installed(layout, "sys/post")
        project, flags = app, ("-system", str(system_toml(layout)))
    before = untouched(layout)
    result = preparer(*flags, project=project)
    refused_and_untouched(result, layout, before)
    assert "[[buildpack.exec-env]] (line 7) is the buildpack spec's spelling, which the lifecycle does not read: " \
        'write exec-env = ["test"] in [buildpack]' in result.stderr  # fmt: skip
    assert "incompatible types" in result.stderr


def test_a_system_buildpack_skipped_on_its_exec_env_is_described_and_not_warned(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    installed(layout, "sys/pre")
    installed(layout, "sys/post", 'exec-env = ["test"]\n')
    result = run(preparer, layout, "-system", str(system_toml(layout)), project=app)
    assert result.code == 0, result.stderr
    assert result.warnings == []  # the platform's, skipped by design: described, not warned
    assert groups(layout)[0][-1] == ("sys/post@1.0.0", "system.toml", False)


@pytest.mark.parametrize("value", ["te$t", "test,production", "*"])
def test_an_exec_env_pack_refuses_is_refused(
    preparer: Callable[..., Result], layout: Layout, app: str, value: str
) -> None:
    before = untouched(layout)
    result = preparer(project=app, env={"CNB_EXEC_ENV": value})
    assert result.code == 3, result.stderr
    assert f"CNB_EXEC_ENV={value!r} is not an execution environment" in result.stderr
    assert untouched(layout) == before


def test_the_lock_records_the_exec_env_and_a_frozen_run_in_another_says_so(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    lock = layout.app / "project.lock"
    written = preparer("-lock", str(lock), project=app, env={"CNB_EXEC_ENV": "test"})
    assert written.code == 0, written.stderr
    assert 'exec-env = "test"\n' in lock.read_text()
    frozen = preparer("-lock", str(lock), project=app)
    assert frozen.code == 0, frozen.stderr
    assert (
        "was made with exec-env test; this build's is production (CNB_EXEC_ENV)"
        in frozen.stdout + frozen.stderr
    )


def test_a_system_buildpack_missing_in_a_group_not_known_before_fetching_is_a_warning_then_a_refusal(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    # ./app-bp could be sys/pre (the detector would then drop the system one): known only once fetched.
    installed(layout, "sys/post")
    system = system_toml(layout)
    warned = (
        f"Warning: sys/pre@1.0.0 (system.toml, system.pre.buildpacks[0]) is not in {layout.buildpacks}: the detector "
        "fails at start-up without it unless ./app-bp turns out to be sys/pre, which is known once fetched (the run "
        "refuses then, before anything is written)"
    )
    dry = preparer("-system", str(system), "-dry-run", project=app)
    assert dry.code == 0, dry.stderr
    assert dry.warnings == [warned]
    before = untouched(layout)
    result = preparer("-system", str(system), project=app)
    refused_and_untouched(result, layout, before)
    assert result.warnings == [warned]
    assert "ERROR: failed to use system buildpack sys/pre@1.0.0: " in result.stderr
    # The entry fetched is sys/pre: the detector drops the system one, and so does the preparer.
    (layout.app / "app-bp" / "buildpack.toml").write_text(buildpack_toml("sys/pre", "3.0.0", "0.12"))
    fetched = run(preparer, layout, "-system", str(system), project=app)
    assert fetched.code == 0, fetched.stderr
    assert groups(layout) == [
        [
            ("sys/pre@3.0.0", "project", True),
            ("examples/node@1.2.0", "project", True),
            ("sys/post@1.0.0", "system.toml", True),
        ]
    ]


def test_a_system_version_that_climbs_out_of_buildpacks_is_refused_and_never_read(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    # A buildpack.toml outside <buildpacks>, which the version would reach if it were joined as a path.
    local(layout.root / "outside", "sys/pre", 'exec-env = ["test"]\n', api="0.12")
    installed(layout, "sys/pre", version="2.0.0")  # <buildpacks>/sys_pre exists, so the path would resolve
    system = layout.root / "system.toml"
    system.write_text('[system]\n[[system.pre.buildpacks]]\nid = "sys/pre"\nversion = "../../../outside"\n')
    dry = preparer("-system", str(system), "-dry-run", project=app)
    assert dry.code == 0, dry.stderr
    assert "skips sys/pre" not in dry.stdout  # its exec-env was not read
    before = untouched(layout)
    result = preparer("-system", str(system), project=app)
    refused_and_untouched(result, layout, before)
    assert (
        f"system.pre.buildpacks[0] of {system} names sys/pre@../../../outside, which is not a buildpack id and "
        f"version: the detector fails at start-up without it; write the id and version of a buildpack in "
        f"{layout.buildpacks} there"
    ) in result.stderr


def test_the_library_report_has_the_groups_as_the_detector_runs_them(layout: Layout) -> None:
    installed(layout, "sys/pre")
    installed(layout, "sys/post", 'exec-env = ["test"]\n')
    (layout.app / "project.toml").write_text(group("urn:cnb:builder:examples/node@1.2.0"))
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
        system_path=str(system_toml(layout)), exec_env="production",
    )  # fmt: skip
    report = prepare(inputs)
    assert report.exec_env == "production"
    assert report.system is not None and report.system["action"] == "merged"
    members = report.groups[0].members
    assert [(m.ref, m.origin, m.entry, m.skipped) for m in members] == [
        ("sys/pre@1.0.0", "system.toml", "system.pre.buildpacks[0]", ""),
        ("examples/node@1.2.0", "project", "io.buildpacks.group[0]", ""),
        (
            "sys/post@1.0.0",
            "system.toml",
            "system.post.buildpacks[0]",
            'its exec-env = ["test"] does not hold production, this build\'s (CNB_EXEC_ENV)',
        ),
    ]


def test_exec_env_in_a_buildpack_older_than_api_0_12_runs_and_is_warned(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.app / "t", "me/t", 'exec-env = ["test"]\n', api="0.10")
    result = run(preparer, layout, project=group("./t", "urn:cnb:builder:examples/node@1.2.0"))
    assert result.code == 0, result.stderr
    assert result.warnings == [
        (
            'Warning: me/t@1.0.0 (project, io.buildpacks.group[0]) runs although its exec-env = ["test"] does not '
            "hold production, this build's (CNB_EXEC_ENV): the detector reads exec-env from Buildpack API 0.12, and "
            "its api is older"
        )
    ]
    assert groups(layout)[0][0] == ("me/t@1.0.0", "project", True)


def test_system_toml_is_an_input_of_the_provenance_and_of_a_saved_plan(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    installed(layout, "sys/pre")
    installed(layout, "sys/post")
    system = system_toml(layout)
    project = group("urn:cnb:builder:examples/node@1.2.0")
    result = preparer(
        "-system", str(system), "-provenance", str(layout.layers / "prov.json"), project=project
    )
    assert result.code == 0, result.stderr
    provenance = json.loads((layout.layers / "prov.json").read_text())["predicate"]["buildDefinition"]
    assert {
        "name": system.name,  # outside <app>: by name, as the other files (docs/provenance.md)
        "digest": {"sha256": hashlib.sha256(system.read_bytes()).hexdigest()},
        "annotations": {"role": "system buildpacks"},
    } in provenance["resolvedDependencies"]
    assert provenance["internalParameters"]["detector"]["system"]["pre"] == ["sys/pre@1.0.0"]
    # A plan made, then system.toml changed: the plan is another build's, and is refused.
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
        system_path=str(system),
    )  # fmt: skip
    plan = plan_run(inputs)
    system.write_text(system.read_text().replace('id = "sys/post"', 'id = "sys/pre"'))
    with pytest.raises(InvalidInputsError) as refused:
        run_plan(plan)
    assert str(system) in str(refused.value)


def test_a_system_buildpack_for_another_target_is_refused_naming_system_toml(
    preparer: Callable[..., Result], layout: Layout, app: str
) -> None:
    installed(layout, "sys/pre", '\n[[targets]]\nos = "linux"\narch = "arm64"\n')
    installed(layout, "sys/post")
    system = system_toml(layout)
    before = untouched(layout)
    result = preparer("-system", str(system), project=app, env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    refused_and_untouched(result, layout, before)
    error = result.stderr.splitlines()[-1]
    assert error.startswith("ERROR: failed to use system buildpack sys/pre@1.0.0: it runs on linux/arm64; ")
    assert error.endswith(f"; {system} (system.pre.buildpacks[0]) names it")
    ok = preparer("-system", str(system), project=app, env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    assert ok.code == 0, ok.stderr


@pytest.mark.parametrize("written", ['version = "1.0.0"', 'id = ""\nversion = ""'])
def test_a_system_buildpack_without_an_id_is_refused_whatever_the_group_holds(
    preparer: Callable[..., Result], layout: Layout, written: str
) -> None:
    # The detector looks <buildpacks>/buildpack.toml up for it and fails at start-up. An element without an id
    # must not pass for one of the project's not fetched yet, which leaves the group's system buildpacks unchecked.
    installed(layout, "sys/post")
    system = layout.root / "system.toml"
    system.write_text(f"[system]\n[[system.pre.buildpacks]]\n{written}\n")
    project = group("urn:cnb:builder:examples/node@1.2.0")
    refusal = (
        f"ERROR: failed to use system buildpack system.pre.buildpacks[0]: system.pre.buildpacks[0] of {system} has "
        f"no id: the detector fails at start-up without it; write the id and version of a buildpack in "
        f"{layout.buildpacks} there"
    )
    dry = preparer("-system", str(system), "-dry-run", project=project)
    assert (dry.code, dry.stderr.splitlines()[-1]) == (1, refusal)
    before = untouched(layout)
    result = preparer("-system", str(system), project=project)
    refused_and_untouched(result, layout, before)
    assert result.stderr.splitlines()[-1] == refusal


def test_an_exec_env_that_differs_from_a_buildpack_s_only_in_case_says_so(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    # CNB_EXEC_ENV=Production is a valid value (pack's letters), and the detector compares it as written: every
    # buildpack that lists production is skipped. The message says why the value that looks right does not match.
    local(layout.app / "t", "me/t", 'exec-env = ["test", "production"]\n', api="0.12")
    before = untouched(layout)
    result = preparer(project=group("./t"), env={"CNB_EXEC_ENV": "Production"})
    refused_and_untouched(result, layout, before)
    assert (
        'me/t@1.0.0: its exec-env = ["test", "production"] does not hold Production, this build\'s (CNB_EXEC_ENV), '
        "only production, which the detector does not take for it (it compares them as written, case and all)"
    ) in result.stderr.splitlines()[-1]


@pytest.mark.parametrize("how", ["a link to itself", "below a file"])
def test_a_system_toml_that_cannot_be_opened_for_another_reason_than_its_absence_is_refused(
    preparer: Callable[..., Result], layout: Layout, how: str
) -> None:
    # The detector merges none only when opening the file says it does not exist (ENOENT); a link loop or a path
    # through a file fails its start-up ("failed to read system file"). Read on, both passed for "does not exist".
    if how == "a link to itself":
        system = layout.root / "system.toml"
        system.symlink_to(system)
        cause = "Too many levels of symbolic links"
    else:
        (layout.root / "cnb-file").write_text("")
        system = layout.root / "cnb-file" / "system.toml"
        cause = "Not a directory"
    project = group("urn:cnb:builder:examples/node@1.2.0")
    for dry in ([], ["-dry-run"]):
        before = untouched(layout)
        result = preparer(*dry, "-system", str(system), project=project)
        refused_and_untouched(result, layout, before)
        assert result.stderr.splitlines()[-1] == f"ERROR: failed to read system buildpacks: {system}: {cause}"
    # A link to nothing is a file that does not exist, for the detector as for the preparer.
    (layout.root / "nothing.toml").symlink_to(layout.root / "absent.toml")
    assert preparer("-system", str(layout.root / "nothing.toml"), project=project).code == 0
