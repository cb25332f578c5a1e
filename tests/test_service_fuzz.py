"""Fuzzing the validator service with schemathesis against its own OpenAPI document.

In-process over ASGI (no network), bounded (50 examples per operation and mode, derandomized
so CI is reproducible). Checked on every response: no 5xx, the status code is documented,
the content type is documented, and the body matches the documented schema.

Two checks are left out on purpose: ``negative_data_rejection`` (a config that violates the
RunConfig schema is *answered*, with HTTP 200 and findings: that is the service's job) and
``positive_data_acceptance`` (a schema-valid body can still be refused with a documented 422:
an override string that Hydra cannot parse, a tokenizer path outside the allowed roots).
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode  # noqa: E402

from cfgcheck.service import ServiceSettings, create_app  # noqa: E402
from tests.conftest import CONF, REPO  # noqa: E402

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]

app = create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,), request_timeout_s=30.0))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=50
)


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # relative paths in generated configs resolve inside the root


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_api_conforms_to_its_openapi(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=CHECKS)
