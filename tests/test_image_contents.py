"""What the image built by the Dockerfile contains, and that its demo works, checked without a Docker engine.

The build context is the checkout's tracked files (``git ls-files``, as on a clean clone) less what
.dockerignore leaves out, matched by Docker's own rules (moby's patternmatcher, ported below). The
image's files are the ones the Dockerfile's COPY instructions take from that context. They are copied
into a temporary folder laid out like the image's file system, and ``manage.py migrate`` and
``manage.py seed_demo`` run there in a subprocess, as ``docker compose run web python manage.py ...``
would: from the image's working directory, importing the copied files only (never the checkout), with
only the packages the image installs (the runtime lock its Dockerfile installs; the dev extras, moto
among them, are not in the image).
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dashboard.management.commands.seed_demo import DEMO_SCALE, DEMO_TREES

ROOT = Path(__file__).resolve().parents[1]

# --- .dockerignore, by Docker's rules --------------------------------------------------------------


def _go_clean(path: str) -> str:
    """Go's filepath.Clean on a /-separated path (posixpath.normpath keeps a leading "//"; Go does not)."""
    if not path:
        return "."
    cleaned = posixpath.normpath(path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    return cleaned


@dataclass(frozen=True)
class IgnorePattern:
    """One line of a .dockerignore, compiled the way moby's patternmatcher compiles it."""

    cleaned: str
    exclusion: bool  # a "!" line: an exception that puts matching paths back in
    kind: str  # "exact", "prefix", "suffix" or "regexp", as patternmatcher's matchType
    regexp: re.Pattern | None

    @classmethod
    def compile(cls, pattern: str, exclusion: bool) -> IgnorePattern:
        """Port of patternmatcher's Pattern.compile: the glob becomes a regular expression unless it is
        a plain path ("exact"), a plain path followed by "**" ("prefix") or "**" followed by a plain path
        ("suffix"). "*" and "?" stop at "/"; "**/" is any number of directories, none included; a trailing
        "**" is anything; "[...]" is a character class; "\\" escapes the next character."""
        regex = "^"
        kind = "exact"
        i, n, iteration = 0, len(pattern), 0
        while i < n:
            ch = pattern[i]
            i += 1
            if ch == "*":
                if i < n and pattern[i] == "*":
                    i += 1
                    if i < n and pattern[i] == "/":  # "**/" is "**"
                        i += 1
                    if i == n:  # "**" at the end: anything
                        if kind == "exact":
                            kind = "prefix"
                        else:
                            regex += ".*"
                            kind = "regexp"
                    else:
                        regex += "(.*/)?"
                        kind = "regexp"
                    if iteration == 0:
                        kind = "suffix"
                else:
                    regex += "[^/]*"
                    kind = "regexp"
            elif ch == "?":
                regex += "[^/]"
                kind = "regexp"
            elif ch in ".+()|{}$":
                regex += "\\" + ch
            elif ch == "\\":
                if i < n:
                    regex += "\\" + pattern[i]
                    i += 1
                    kind = "regexp"
                else:
                    regex += "\\\\"
            elif ch in "[]":
                regex += ch
                kind = "regexp"
            else:
                regex += ch
            iteration += 1
        compiled = None
        if kind == "regexp":
            compiled = re.compile(regex + r"\Z")  # Go's "$" without the multi-line flag: the very end
        return cls(cleaned=pattern, exclusion=exclusion, kind=kind, regexp=compiled)

    def match(self, path: str) -> bool:
        if self.kind == "exact":
            return path == self.cleaned
        if self.kind == "prefix":
            return path.startswith(self.cleaned[:-2])
        if self.kind == "suffix":
            suffix = self.cleaned[2:]
            return path.endswith(suffix) or (suffix[:1] == "/" and path == suffix[1:])
        assert self.regexp is not None
        return self.regexp.match(path) is not None


def parse_dockerignore(text: str) -> list[IgnorePattern]:
    """The patterns of a .dockerignore, read as Docker reads them (ignorefile.ReadAll, then patternmatcher.New).

    A line whose first character is "#" is a comment (only in column 1: an indented "#" is a pattern);
    each line is trimmed and blank ones skipped; "!" starts an exception; the rest is cleaned like a
    path (so "foo/", "./foo" and "/foo" all mean "foo", relative to the context root)."""
    patterns = []
    for number, raw in enumerate(text.split("\n")):
        line = raw.removesuffix("\r")
        if number == 0:
            line = line.removeprefix("\ufeff")
        if line.startswith("#"):
            continue
        line = line.strip()
        if not line:
            continue
        exclusion = line.startswith("!")
        if exclusion:
            line = line[1:].strip()
        if line:
            line = _go_clean(line)
            if len(line) > 1 and line.startswith("/"):
                line = line[1:]
        if exclusion and not line:
            raise ValueError(f'.dockerignore line {number + 1}: illegal exclusion pattern: "!"')
        patterns.append(IgnorePattern.compile(_go_clean(line), exclusion))
    return patterns


def ignored(path: str, patterns: list[IgnorePattern]) -> bool:
    """Whether .dockerignore leaves ``path`` (relative to the context root) out of the build context.

    patternmatcher.MatchesOrParentMatches: a pattern matches a path when it matches the path or any of
    its parent directories; the patterns are applied in order and the last one that matches decides."""
    path = _go_clean(path)
    parent = posixpath.dirname(path)
    parents = parent.split("/") if parent else []
    matched = False
    for pattern in patterns:
        if pattern.exclusion != matched:
            continue  # an exception can only put back what is out; a pattern only take out what is in
        match = pattern.match(path)
        if not match:
            match = any(pattern.match("/".join(parents[: i + 1])) for i in range(len(parents)))
        if match:
            matched = not pattern.exclusion
    return matched


def context_files(root: Path = ROOT) -> list[str]:
    """The build context a clean clone sends: its tracked files, less what .dockerignore leaves out."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    tracked = [p for p in listed.split("\0") if p and (root / p).is_file()]  # not those deleted but unstaged
    dockerignore = root / ".dockerignore"
    patterns = parse_dockerignore(dockerignore.read_text(encoding="utf-8")) if dockerignore.exists() else []
    return sorted(p for p in tracked if not ignored(p, patterns))


# --- the Dockerfile's COPY instructions -----------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile with the default escape character: comment lines dropped,
    continued lines joined."""
    if re.match(r"(?i)\s*#\s*escape\s*=", text):
        raise NotImplementedError("a Dockerfile with an escape directive")
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (pending and not line):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line:
            word, _, args = line.partition(" ")
            if re.search(r"<<-?[\"']?\w", args):
                raise NotImplementedError(f"a heredoc: {line}")
            out.append((word.upper(), args.strip()))
    return out


def _go_glob(pattern: str) -> re.Pattern:
    """Go's filepath.Match as a regular expression: "*" and "?" stop at "/"."""
    out = ""
    for ch in pattern:
        out += {"*": "[^/]*", "?": "[^/]"}.get(ch, ch if ch in "[]^!-\\" else re.escape(ch))
    return re.compile(out + r"\Z")


def image_files(dockerfile: Path, context: list[str]) -> tuple[dict[PurePosixPath, str], PurePosixPath]:
    """The files the Dockerfile's COPY instructions put in the image (image path -> context path), and the
    working directory its commands run in. Only what this Dockerfile uses is modelled: one stage, COPY
    from the context; anything else (ADD, COPY --from, heredocs, variables) fails here rather than being
    guessed."""
    files: dict[PurePosixPath, str] = {}
    workdir = PurePosixPath("/")
    dirs = {workdir}
    stages = 0
    entries = set(context) | {str(PurePosixPath(p).parents[i]) for p in context for i in range(p.count("/"))}
    for word, args in _instructions(dockerfile.read_text(encoding="utf-8")):
        if word == "FROM":
            stages += 1
            if stages > 1:
                raise NotImplementedError("a multi-stage Dockerfile")
        elif word in {"WORKDIR", "COPY", "ADD"} and "$" in args:
            raise NotImplementedError(f"a variable in {word} {args}")
        elif word == "WORKDIR":
            workdir = workdir / args
            dirs.update({workdir, *workdir.parents})
        elif word == "ADD":
            raise NotImplementedError(f"ADD {args}")
        elif word == "COPY":
            if "<<" in args:
                raise NotImplementedError(f"a COPY heredoc: {args}")
            parts = json.loads(args) if args.startswith("[") else shlex.split(args)
            while parts and parts[0].startswith("--"):
                flag = parts.pop(0).partition("=")[0]
                if flag not in {"--chown", "--chmod", "--link"}:
                    raise NotImplementedError(f"COPY {flag}")
            *sources, dest = parts
            target = workdir / dest
            into_dir = dest in {".", ""} or dest.endswith("/") or len(sources) > 1 or target in dirs
            for source in sources:
                source = _go_clean(source.lstrip("/") or ".")
                if any(ch in source for ch in "*?["):
                    matches = sorted(e for e in entries if _go_glob(source).match(e))
                    into_dir = True
                else:
                    matches = [source] if source == "." or source in entries else []
                if not matches:
                    raise FileNotFoundError(f"COPY {source}: not in the build context (.dockerignore?)")
                for match in matches:
                    if match in context:  # a file
                        to = target / PurePosixPath(match).name if into_dir else target
                        files[to] = match
                    else:  # a directory: its contents
                        below = context if match == "." else [p for p in context if p.startswith(match + "/")]
                        for path in below:
                            files[target / PurePosixPath(path).relative_to(match)] = path
            dirs.update(parent for path in files for parent in path.parents)
    return files, workdir


# --- the packages the image installs ---------------------------------------------------------------


def _installed_closure(requirements: list[str]) -> set[str]:
    """The installed distributions (canonical names) that satisfy ``requirements``, dependencies included."""
    seen: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen and set(req.extras) <= seen[name]:
            continue
        extras = seen.setdefault(name, set())
        extras.update(req.extras)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in {"", *extras}):
                sub.marker = None
                todo.append(sub)
    return set(seen)


def image_packages() -> set[str]:
    """The distributions (canonical names) the Dockerfile installs: those of the requirement files its RUN
    instructions hand to ``pip install -r`` (the runtime lock), or else the closure of pyproject.toml's
    ``[project] dependencies``."""
    locks = [
        ROOT / path
        for word, args in _instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))
        if word == "RUN" and "pip install" in args
        for path in re.findall(r"(?:-r|--requirement)[ =](\S+)", args)
        if (ROOT / path).is_file()
    ]
    if not locks:
        return _installed_closure(_project()["dependencies"])
    pinned = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?\s*==", re.M)
    return {canonicalize_name(name) for lock in locks for name in pinned.findall(lock.read_text())}


def not_in_image_modules() -> list[str]:
    """Top-level modules installed here (by the dev extras) that the image does not install: its base
    image brings pip, setuptools and wheel, its Dockerfile the packages of image_packages() and the project."""
    keep = image_packages() | {"pip", "setuptools", "wheel", canonicalize_name(_project()["name"])}
    return sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if not {canonicalize_name(d) for d in dists} & keep
    )


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


# Runs manage.py the way the image does (``python manage.py ...`` in its working directory), refusing any
# import that resolves into the checkout instead of the image's copy, or that only the dev extras provide.
LAUNCHER = textwrap.dedent(
    '''
    import json, os, runpy, sys

    guard = json.loads(os.environ.pop("IMAGE_TEST_GUARD"))
    checkout, image, blocked = guard["checkout"], os.getcwd(), set(guard["blocked"])
    venv = os.path.realpath(sys.prefix)


    def _inside(path, folder):
        return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


    def _from_checkout(path):
        if not path or not os.path.isabs(path):
            return False
        path = os.path.realpath(path)
        return _inside(path, checkout) and not _inside(path, venv) and not _inside(path, image)


    class ImageOnly:
        """A meta path finder in front of the others: it vets what they find."""

        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r} (a dev extra; the image has none)", name=name)
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            for place in [spec.origin, *(spec.submodule_search_locations or ())]:
                if _from_checkout(place):
                    raise ModuleNotFoundError(f"{name!r} is not in the image (it resolved to {place})", name=name)
            return spec


    sys.meta_path.insert(0, ImageOnly())
    sys.path[0] = image  # as for "python manage.py": the script's folder first
    sys.path[:] = [p for p in sys.path if not _from_checkout(p)]
    sys.argv = ["manage.py", *sys.argv[1:]]
    runpy.run_path("manage.py", run_name="__main__")
    '''
)


@dataclass(frozen=True)
class Image:
    """The image's file system, laid out in a folder, and how to run its manage.py."""

    rootfs: Path
    workdir: Path
    launcher: Path
    blocked: tuple[str, ...]

    def manage(self, var_dir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("CKPTFLEET_", "DJANGO_", "PYTHON", "AWS_"))
            and key not in {"DATABASE_URL", "REDIS_URL", "MEDIA_ROOT", "STATIC_ROOT", "PGPASSWORD"}
        }
        env.update(
            CKPTFLEET_DEBUG="1",  # the embedded default: SQLite in CKPTFLEET_VAR_DIR, tasks in-process
            CKPTFLEET_VAR_DIR=str(var_dir),
            PYTHONDONTWRITEBYTECODE="1",
            IMAGE_TEST_GUARD=json.dumps({"checkout": os.path.realpath(ROOT), "blocked": self.blocked}),
        )
        return subprocess.run(
            [sys.executable, str(self.launcher), *args],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@functools.cache
def _image_plan() -> tuple[dict[PurePosixPath, str], PurePosixPath]:
    return image_files(ROOT / "Dockerfile", context_files())


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Image:
    files, workdir = _image_plan()
    base = tmp_path_factory.mktemp("image")
    rootfs = base / "rootfs"
    for target, source in files.items():
        dest = rootfs / target.relative_to("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / source, dest)
    launcher = base / "launch.py"  # outside the image's folders: it is the test's, not the image's
    launcher.write_text(LAUNCHER)
    return Image(
        rootfs=rootfs,
        workdir=rootfs / workdir.relative_to("/"),
        launcher=launcher,
        blocked=tuple(not_in_image_modules()),
    )


def _counts(image: Image, var_dir: Path) -> dict[str, int]:
    query = (
        "import json; from django.apps import apps; m = apps.get_model; "
        "print(json.dumps({"
        "'hosts': m('fleet', 'Host').objects.count(), "
        "'applied': m('fleet', 'Inventory').objects.filter(status='applied').count(), "
        "'failed': m('fleet', 'Inventory').objects.filter(status='failed').count(), "
        "'runs': m('catalog', 'Run').objects.count(), "
        "'teams': m('catalog', 'Run').objects.values('team').distinct().count(), "
        "'checkpoints': m('catalog', 'Checkpoint').objects.count(), "
        "'copies': m('catalog', 'CheckpointCopy').objects.count()}))"
    )
    result = image.manage(var_dir, "shell", "-c", query)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("dockerignore", "out", "kept"),
    [
        # The examples of Docker's documentation (the .dockerignore file section of the Dockerfile reference).
        ("# comment\n*/temp*", ["somedir/temporary.txt", "somedir/temp", "somedir/temp/x"], ["temp", "a/b/temp1"]),
        ("*/*/temp*", ["somedir/subdir/temporary.txt"], ["somedir/temporary.txt", "temp"]),
        ("temp?", ["tempa", "tempb", "tempa/x"], ["temp", "tempab", "a/tempa"]),
        ("**/*.go", ["main.go", "a/b/c.go"], ["main.goo", "a/go"]),
        ("*.md\n!README.md", ["CHANGES.md"], ["README.md", "docs/x.md"]),
        ("*.md\n!README*.md\nREADME-secret.md", ["README-secret.md", "CHANGES.md"], ["README-x.md"]),
        ("*.md\nREADME-secret.md\n!README*.md", ["CHANGES.md"], ["README-secret.md", "README.md"]),
        ("*\n!src", ["Dockerfile", "a/b"], ["src", "src/a/b.py"]),
        # Relative to the context root whatever the spelling; a directory excludes what is below it.
        ("/foo/bar", ["foo/bar", "foo/bar/x"], ["a/foo/bar", "foo/barx"]),
        ("./secrets/", ["secrets", "secrets/key"], ["a/secrets", "secretsx"]),
        ("build//", ["build/x"], ["a/build/x"]),
        # "#" makes a comment in column 1 only; blank lines and surrounding blanks go.
        ("  #x  \n\n   \n", ["#x", "#x/y"], ["x"]),
        # "**": any number of directories (none included); "**" at the end: anything below.
        ("a/**/b", ["a/b", "a/x/y/b", "a/b/c"], ["b", "x/a/b"]),
        ("**/__pycache__", ["__pycache__/m.pyc", "a/b/__pycache__/m.pyc"], ["a/x__pycache__"]),
        ("foo/**", ["foo/x", "foo/x/y"], ["foo", "foox"]),
        # Exceptions put back what an earlier line left out, and a later line takes it out again.
        ("tests\n!tests/keep.txt", ["tests/other.txt"], ["tests/keep.txt"]),
        ("tests\n!tests/keep.txt\ntests/keep*", ["tests/keep.txt"], []),
        ("te[sx]t?\n\\*.py", ["test1", "text2", "*.py"], ["tent1", "a.py"]),
    ],
)
def test_dockerignore_matching_follows_dockers_rules(dockerignore, out, kept):
    patterns = parse_dockerignore(dockerignore)
    assert [p for p in out if not ignored(p, patterns)] == []
    assert [p for p in kept if ignored(p, patterns)] == []


def test_a_bare_exclamation_mark_is_refused_as_docker_refuses_it():
    with pytest.raises(ValueError, match="illegal exclusion pattern"):
        parse_dockerignore("tests\n!\n")


def test_the_dockerfile_model_copies_files_directories_and_globs_as_copy_does(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.11-slim\n# a comment\nWORKDIR /app\nCOPY pyproject.toml ./\nCOPY a.txt b.txt\n"
        "COPY --chown=1:1 src \\\n    /opt/src2\nCOPY *.md doc/\nCOPY . /all\nRUN true\n"
    )
    context = ["pyproject.toml", "a.txt", "src/m.py", "src/sub/n.py", "README.md", "x/y.md"]
    files, workdir = image_files(dockerfile, context)
    assert workdir == PurePosixPath("/app")
    assert {str(k): v for k, v in files.items() if not str(k).startswith("/all/")} == {
        "/app/pyproject.toml": "pyproject.toml",
        "/app/b.txt": "a.txt",
        "/opt/src2/m.py": "src/m.py",
        "/opt/src2/sub/n.py": "src/sub/n.py",
        "/app/doc/README.md": "README.md",
    }
    assert sorted(v for k, v in files.items() if str(k).startswith("/all/")) == sorted(context)
    dockerfile.write_text("FROM python:3.11-slim\nCOPY tests/ /app/\n")
    with pytest.raises(FileNotFoundError, match="not in the build context"):
        image_files(dockerfile, context)


def test_the_image_holds_the_demo_trees_and_leaves_tests_out():
    files, workdir = _image_plan()
    in_image = {str(target.relative_to(workdir)) for target in files if target.is_relative_to(workdir)}
    trees = DEMO_TREES.relative_to(ROOT).as_posix()
    listed = subprocess.run(["git", "ls-files", trees], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    tracked = set(listed.splitlines())
    assert len(tracked) > 50, f"the demo trees are not committed under {trees}"
    assert tracked - in_image == set(), "seed_demo copies these, and the image lacks them"
    scale = DEMO_SCALE.relative_to(ROOT).as_posix()
    manifests = subprocess.run(["git", "ls-files", scale], cwd=ROOT, capture_output=True, text=True, check=True)
    assert len(manifests.stdout.splitlines()) == 2, f"the production-shaped manifests are not committed under {scale}"
    assert set(manifests.stdout.splitlines()) - in_image == set(), "seed_demo reads these, and the image lacks them"
    assert {"manage.py", "dashboard/management/commands/seed_demo.py", "pyproject.toml"} <= in_image
    assert not [p for p in in_image if p.startswith(("tests/", "secrets/", "var/", ".git/"))]
    assert "demo/make_trees.py" not in in_image  # it needs torch; only the trees it wrote are needed


def test_the_images_python_imports_the_images_files_only(image, tmp_path):
    probe = (
        "import catalog\nprint('probe', 'catalog', catalog.__file__)\n"
        "for name in ('tests', 'moto', 'pytest'):\n"
        "    try:\n        __import__(name)\n    except ImportError:\n        print('probe', name, 'refused')\n"
        "    else:\n        print('probe', name, 'imported')\n"
    )
    result = image.manage(tmp_path / "var", "shell", "-c", probe)
    assert result.returncode == 0, result.stderr
    found = dict(line.split()[1:] for line in result.stdout.splitlines() if line.startswith("probe "))
    assert Path(found.pop("catalog")).is_relative_to(image.workdir)
    assert found == {"tests": "refused", "moto": "refused", "pytest": "refused"}


def test_the_images_demo_seeds_from_the_files_the_image_holds(image, tmp_path):
    var_dir = tmp_path / "var"
    migrated = image.manage(var_dir, "migrate", "--no-input")
    assert migrated.returncode == 0, f"migrate failed in the image's folder:\n{migrated.stderr}"

    seeded = image.manage(var_dir, "seed_demo")
    assert seeded.returncode == 0, f"seed_demo failed in the image's folder:\n{seeded.stdout}\n{seeded.stderr}"
    # The demo of tests/catalog/test_seed_demo.py: five hosts, eight runs of four teams, 39 copies of 35
    # checkpoints (the production-shaped runs on gpu-c12: 21 of each).
    assert _counts(image, var_dir) == {
        "hosts": 5,
        "applied": 5,
        "failed": 0,
        "runs": 8,
        "teams": 4,
        "checkpoints": 35,
        "copies": 39,
    }
    assert "demo actions: pinned" in seeded.stdout


def test_the_images_demo_fills_and_scans_buckets_on_an_s3_endpoint_without_moto_in_the_image(image, tmp_path, s3):
    """The image has boto3 (a dependency) but not moto (a dev extra): the endpoint is a URL, moto runs here."""
    var_dir = tmp_path / "var"
    assert image.manage(var_dir, "migrate", "--no-input").returncode == 0
    seeded = image.manage(var_dir, "seed_demo", "--s3-endpoint", s3.url)
    assert seeded.returncode == 0, f"seed_demo failed in the image's folder:\n{seeded.stdout}\n{seeded.stderr}"
    counts = _counts(image, var_dir)
    assert (counts["hosts"], counts["applied"], counts["failed"]) == (5, 8, 0), counts  # 5 hosts + 3 bucket scans
    assert counts["copies"] > 39, counts  # the buckets' copies of the same checkpoints
    assert "s3:ckpt-demo-eu (s3://ckpt-demo-eu/fleet/" in seeded.stdout
