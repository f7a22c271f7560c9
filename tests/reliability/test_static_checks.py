"""Static checks of the code, the locked dependencies, the production settings and the API schema:

- bandit over our own packages: no finding of medium or high severity at high confidence. A finding that is
  not a risk is marked where it stands, ``# nosec BXXX - why``, never silenced for the whole tree;
- pip-audit over requirements/lock.txt (what the image installs): no known vulnerability. Where the advisory
  service (PyPI's vulnerability data) cannot be reached, the test says so and passes: it proves nothing there;
- ``manage.py check --deploy --fail-level WARNING`` with the production environment (``make check-deploy``);
- ``manage.py spectacular --validate --fail-on-warn``: the schema is valid OpenAPI and every authenticator
  (the host agents' token included) and every view is described.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.reliability.conftest import report

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# The packages of pyproject.toml's [tool.setuptools.packages.find], and the scripts that run beside them.
PACKAGES = [
    "ckptfleet", "audit", "access", "fleet", "catalog", "actions", "spend", "ingest", "retention", "promotion",
    "dashboard", "manage.py", "scripts",
]  # fmt: skip
UNREACHABLE = ("ConnectionError", "Max retries exceeded", "Failed to establish", "Name or service not known",
               "Temporary failure in name resolution", "timed out", "Network is unreachable")  # fmt: skip


def run(*command: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def test_bandit_finds_nothing_of_medium_or_high_severity_at_high_confidence():
    done = run(
        str(BIN / "bandit"), "-r", *PACKAGES, "-x", "*/migrations/*", "--severity-level", "medium",
        "--confidence-level", "high", "-f", "json", "-q",
    )  # fmt: skip
    results = json.loads(done.stdout)
    findings = [
        f"{r['filename']}:{r['line_number']} {r['test_id']} {r['issue_severity']}: {r['issue_text']}"
        for r in results["results"]
    ]
    scanned = results["metrics"]["_totals"]["loc"]
    report("bandit: lines scanned, medium+ findings at high confidence", f"{scanned}, {len(findings)}")
    assert findings == [], "\n".join(findings)
    assert done.returncode == 0, done.stderr[-3000:]


def test_pip_audit_finds_no_known_vulnerability_in_the_runtime_lock():
    done = run(
        str(BIN / "pip-audit"), "--requirement", "requirements/lock.txt", "--no-deps", "--disable-pip",
        "--vulnerability-service", "pypi", "--format", "json", "--progress-spinner", "off",
        timeout=900,
    )  # fmt: skip
    if done.returncode != 0 and any(word in done.stderr for word in UNREACHABLE):
        report("pip-audit", "the advisory service (PyPI) is unreachable from here; nothing was checked")
        print(done.stderr[-1000:])
        return
    audit = json.loads(done.stdout or "{}")
    packages = audit.get("dependencies", [])
    vulnerable = [
        f"{p['name']} {p['version']}: {', '.join(v['id'] for v in p['vulns'])}" for p in packages if p.get("vulns")
    ]
    report("pip-audit: packages audited, vulnerable", f"{len(packages)}, {len(vulnerable)}")
    assert vulnerable == [], "\n".join(vulnerable)
    assert done.returncode == 0 and packages, done.stderr[-3000:]


def test_check_deploy_passes_with_the_production_settings():
    done = run("make", "--no-print-directory", "check-deploy")
    report("check --deploy --fail-level WARNING", "passed" if done.returncode == 0 else "failed")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_api_schema_validates_without_a_warning(tmp_path):
    env = {**os.environ, "CKPTFLEET_DEBUG": "1", "CKPTFLEET_VAR_DIR": str(tmp_path / "var")}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    done = run(
        sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yml"),
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "securitySchemes" in (tmp_path / "s.yml").read_text()
