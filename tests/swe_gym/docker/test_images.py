"""Image names, apt sources, pull policies and local builds (swe_gym.images)."""

from __future__ import annotations

import dataclasses

import pytest

from swe_gym.errors import SandboxUnavailable
from swe_gym.images.base import apt_mirror
from swe_gym.images.common import BuildError, ImageError
from swe_gym.images.recipes import instance_tag, recipe_for
from swe_gym.images.resolve import candidates, ensure_image, published_names
from swe_gym.tasks import Task


def test_published_names_follow_the_1776_rule():
    assert published_names("Astropy__astropy-12907") == [
        "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907",
        "swerebench/sweb.eval.x86_64.astropy_1776_astropy-12907",
    ]


def test_candidates_put_the_rows_image_first_and_rebench_first_for_rebench_rows(starter):
    t = dataclasses.replace(starter[0], image_name="me/img:1")
    assert candidates(t)[0] == "me/img:1"
    assert candidates(t)[1].startswith("swerebench/")  # the row has an install_config
    plain = dataclasses.replace(starter[0], install_config=None)
    assert candidates(plain)[0].startswith("swebench/")


def test_apt_mirror_reads_deb822_and_one_line_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://other.invalid/debian-security\n"
        "Suites: bookworm-security\n"
    )
    assert apt_mirror("bookworm", tmp_path) == "http://mirror.invalid/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "# x\ndeb [arch=amd64] http://one.invalid/debian trixie main\n"
    )
    assert apt_mirror("trixie", tmp_path) == "http://one.invalid/debian"
    assert apt_mirror("bookworm", tmp_path) == "http://one.invalid/debian"  # any Debian pool
    (tmp_path / "sources.list").write_text("")
    with pytest.raises(ImageError, match="no Debian mirror for suite 'bookworm'"):
        apt_mirror("bookworm", tmp_path)


def test_recipe_hash_depends_on_the_environment_fields_only(starter):
    a = starter[0]
    b = dataclasses.replace(a, install_config={**a.install_config, "test_cmd": "pytest -x"})
    c = dataclasses.replace(
        a, install_config={**a.install_config, "pip_packages": ["pytest", "six"]}
    )
    assert recipe_for(a).env_tag == recipe_for(b).env_tag
    assert recipe_for(a).env_tag != recipe_for(c).env_tag
    assert instance_tag(a) != instance_tag(dataclasses.replace(a, base_commit="0" * 40))


def test_unknown_pull_policy_is_named(starter):
    with pytest.raises(ValueError, match="unknown pull_policy 'sometimes'.*if-missing"):
        ensure_image(starter[0], pull_policy="sometimes")


# ----------------------------------------------------------------------------- with a daemon

pytestmark_docker = pytest.mark.docker


@pytest.mark.docker
def test_missing_image_with_policy_never_names_the_image(docker_client, starter, run_id):
    from swe_gym.sandbox.docker import DockerSandbox

    sb = DockerSandbox(starter[0], image="swe-gym/missing:nope", pull_policy="never", run_id=run_id)
    with pytest.raises(SandboxUnavailable, match=r"swe-gym/missing:nope.*pull_policy='never'"):
        sb.start()
    sb.close()


@pytest.mark.docker
def test_pull_of_an_unreachable_image_fails_clearly(docker_client):
    with pytest.raises(ImageError, match=r"no usable image:\n  swe-gym-nowhere/x:1 \(pulling"):
        ensure_image(image="swe-gym-nowhere/x:1", pull_policy="always", client=docker_client)


@pytest.mark.docker
def test_a_failing_build_recipe_raises_with_the_log_tail(docker_client, starter):
    bad = dataclasses.replace(
        starter[0],
        instance_id="starter__broken-recipe",
        install_config={
            **starter[0].install_config,
            "pre_install": ["echo about-to-fail-4711; exit 7"],
        },
    )
    with pytest.raises(BuildError) as info:
        ensure_image(bad, pull_policy="never", client=docker_client)
    msg = str(info.value)
    assert "about-to-fail-4711" in msg and "last lines of the build log" in msg
    assert "returned a non-zero code: 7" in msg


@pytest.mark.docker
def test_starter_images_are_built_once_and_reused(docker_client, starter):
    names = {
        t.instance_id: ensure_image(t, pull_policy="never", client=docker_client) for t in starter
    }
    # Tasks at the same commit share one testbed image.
    assert len(set(names.values())) == len({t.base_commit for t in starter})
    img = docker_client.images.get(names[starter[0].instance_id])
    assert img.labels.get("swe-gym.base_commit") == starter[0].base_commit


def rebench_row(task: Task) -> dict:
    """A row in the SWE-rebench schema for a bundled starter repository, with its own recipe."""
    row = task.to_dict()
    row.update(
        instance_id=task.instance_id + "-rebench",
        docker_image=None,
        install_config={
            "python": "3.11",
            "packages": "",
            "pip_packages": ["pytest"],  # already in the base: installs offline (a no-op)
            "env_vars": {"SWE_GYM_RECIPE_MARK": "from-install-config"},
            "pre_install": ["echo pre-install-ran > /etc/swe-gym-pre-install"],
            "install": "python3 -m pip install --no-index --no-build-isolation -e .",
            "test_cmd": "pytest -rA",
            "log_parser": "parse_log_pytest",
            "reqs_path": [],
            "env_yml_path": [],
            "no_use_env": False,
        },
    )
    return row


@pytest.mark.docker
def test_a_rebench_row_builds_from_its_install_config_and_grades(docker_client, starter, run_id):
    from swe_gym.grading import grade_patch
    from swe_gym.sandbox.docker import DockerSandbox
    from swe_gym.tasks import load_tasks

    (task,) = load_tasks([rebench_row(starter[0])])
    name = ensure_image(task, client=docker_client)
    assert name != ensure_image(starter[0], client=docker_client)  # its own recipe
    with DockerSandbox(task, client=docker_client, run_id=run_id) as sb:
        dist = task.repo.split("/")[-1]  # the starter repositories' distribution names
        r = sb.run(
            f"echo $SWE_GYM_RECIPE_MARK; cat /etc/swe-gym-pre-install; pip show {dist} | head -1"
        )
        assert r.output.split("\n")[:3] == [
            "from-install-config",
            "pre-install-ran",
            f"Name: {dist}",
        ]
    opts = {"client": docker_client, "run_id": run_id}
    assert grade_patch(task, task.patch, backend="docker", sandbox_options=opts).resolved
    assert not grade_patch(task, "", backend="docker", sandbox_options=opts).resolved
