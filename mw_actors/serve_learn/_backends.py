"""Model backends: where a model named ``<backend>/<model id>`` is served.

``local/...`` is the campaign's own provider on loopback. Any other backend is
an OpenAI-compatible endpoint (Fireworks, a vLLM server, ...) that the
campaign reaches only through its wire meters, which inject its key and price
every request. A backend names its URL, or the variable holding it, and the
variable holding its key; the key itself is read by ``bin/`` and lives only in
memory (``CampaignSpec.secrets``).

What is sent upstream is the model id after the backend:
``fireworks/accounts/fireworks/models/x`` asks Fireworks for
``accounts/fireworks/models/x``. A local model is sent whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import msgspec

import meters
from mw_errors import ConfigError

__all__ = [
    "BUILTIN_BACKENDS",
    "Backend",
    "Endpoint",
    "keys_for",
    "resolve_endpoint",
    "split_model",
    "wire_prices",
]


class Backend(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One backend: a fixed URL or the variable naming it, and the variable of its key."""

    base_url: str | None = None
    base_url_env: str | None = None  # read first; base_url is the fallback
    api_key_env: str | None = None  # None: the endpoint takes no key


BUILTIN_BACKENDS: dict[str, Backend] = {
    "fireworks": Backend(
        base_url="https://api.fireworks.ai/inference/v1", api_key_env="FIREWORKS_API_KEY"
    ),
    "vllm": Backend(base_url_env="VLLM_BASE_URL"),
}


class Endpoint(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A remote model, resolved: its URL, the name sent upstream, the variable of its key."""

    model: str  # as the user names it: <backend>/<model id>
    base_url: str
    wire_model: str
    api_key_env: str | None = None


def split_model(name: str) -> tuple[str, str]:
    """``(backend, model id)`` of a model named ``<backend>/<model id>``.

    Raises:
        ConfigError: the name has no backend or no model id.
    """
    backend, slash, ident = name.partition("/")
    if not slash or not backend or not ident:
        raise ConfigError(
            f"model {name!r} must be named <backend>/<model id>",
            hint="for example fireworks/accounts/fireworks/models/..., vllm/Qwen/... "
            "or local/scripted",
        )
    return backend, ident


def resolve_endpoint(
    name: str, backends: Mapping[str, Backend], environ: Mapping[str, str]
) -> Endpoint | None:
    """Where ``name`` is served, or None for a local model (the campaign's own provider).

    ``backends`` extends and overrides :data:`BUILTIN_BACKENDS`; ``environ`` is what
    the caller (``bin/``) read from the environment.

    Raises:
        ConfigError: an unknown backend, no URL, or its key's variable is unset.
    """
    backend, ident = split_model(name)
    if backend == "local":
        return None
    known = {**BUILTIN_BACKENDS, **backends}
    found = known.get(backend)
    if found is None:
        raise ConfigError(
            f"model {name!r}: no backend {backend!r} (known: local, {', '.join(sorted(known))})",
            hint="add it under backends: in the launch config, or use MW_MODEL=local/scripted",
        )
    url = (environ.get(found.base_url_env) if found.base_url_env else None) or found.base_url
    if not url:
        variable = found.base_url_env or "base_url"
        raise ConfigError(
            f"{variable} is not set: model {name!r} needs the URL of its {backend} endpoint",
            hint=f"export {variable}=http://HOST:PORT/v1"
            if found.base_url_env
            else f"set backends.{backend}.base_url in the launch config",
        )
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"the {backend} endpoint {url!r} is not an http(s) URL",
            hint="use a base URL like http://HOST:PORT/v1",
        )
    if found.api_key_env and not environ.get(found.api_key_env):
        raise ConfigError(
            f"{found.api_key_env} is not set; model {name!r} needs it",
            hint=f"export {found.api_key_env}=... (the wire meter injects it and never writes "
            "it down), or run offline with MW_MODEL=local/scripted",
        )
    return Endpoint(
        model=name, base_url=url.rstrip("/"), wire_model=ident, api_key_env=found.api_key_env
    )


def keys_for(endpoints: Iterable[Endpoint], lookup: Callable[[str], str | None]) -> dict[str, str]:
    """The keys ``endpoints`` name, by variable, as ``lookup`` finds them (unset ones left out)."""
    keys: dict[str, str] = {}
    for endpoint in endpoints:
        if endpoint.api_key_env and (key := lookup(endpoint.api_key_env)):
            keys[endpoint.api_key_env] = key
    return keys


def wire_prices(table: meters.PriceTable | None, endpoint: Endpoint) -> meters.PriceTable:
    """The meter's price table for ``endpoint``: its price, under the name sent upstream.

    Raises:
        ConfigError: the launch config prices no such model.
    """
    price = table.models.get(endpoint.model) if table is not None else None
    if table is None or price is None:
        raise ConfigError(
            f"model {endpoint.model!r} has no price"
            + (f" in the launch config's table dated {table.date}" if table else ""),
            hint="check the provider's price page, then add it under prices.models in the "
            "launch config (USD per million tokens); a request is never counted as $0",
        )
    return meters.PriceTable(
        schema_version=table.schema_version,
        date=table.date,
        models={endpoint.wire_model: price},
    )
