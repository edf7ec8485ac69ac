"""The sanitization policy: one TOML file saying what is scanned for what, and what is
authorised to stay (seed 002: "Campaign rules must distinguish authorized task material
from information requiring removal").

The campaign config enables sanitization and names the policy file (``[sanitize]``);
without a file the built-in :data:`DEFAULT_POLICY` applies. The policy's SHA-256 and
version go into the run manifest. Its shape::

    version = "my-campaign-pii/1"        # recorded with every run
    categories = ["email", "phone", ...] # scanned for, unless a kind says otherwise
    phone_regions = ["US"]               # numbers written without +country code (ISO 3166-1 alpha-2)
    secret_fields = ["api_key", ...]     # field/variable names whose values are secrets
    rejected_raw = "withhold_if_found"   # or "withhold", "keep" (see pipeline.sanitize.raw)

    [kinds.pairwise-v2]                  # a kind not listed is scanned whole ("$")
    fields = ["$"]                       # subtrees whose strings are scanned
    code_fields = ["$.response_a"]       # code that must still parse after redaction
    evidence_fields = []                 # verbatim quotes: any redaction → quarantine

    [[exceptions]]                       # authorised material that stays as written
    name = "networking-ips"
    categories = ["ipv4", "ipv6"]
    kinds = ["grounded-qa-v1"]           # optional: every kind
    fields = ["$.answer"]                # optional: every scanned field
    when = { path = "$.domain", in = ["networking"] }   # optional record condition
    networks = ["192.0.2.0/24"]          # optional: only addresses in these networks
    email_domains = ["example.com"]      # optional: only these domains (and subdomains)

Unknown keys and values are errors naming their path, as in the campaign config.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import phonenumbers

from pipeline.core.config import ConfigError, parse_toml
from pipeline.core.files import read_regular
from pipeline.records.lineage import check_pin
from pipeline.sanitize.categories import Category
from pipeline.sanitize.detectors import normalise_name
from pipeline.sanitize.folding import fold
from pipeline.sanitize.paths import FieldSelector, SelectorError

__all__ = [
    "DEFAULT_POLICY",
    "REJECTED_RAW_RULES",
    "AuthorisedException",
    "Condition",
    "KindPolicy",
    "SanitizePolicy",
    "load_policy",
]

DEFAULT_POLICY: Final = Path(__file__).resolve().parent / "default_policy.toml"
#: What happens to the raw bytes of a rejected line when sanitization is on.
REJECTED_RAW_RULES: Final = ("withhold_if_found", "withhold", "keep")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Condition:
    """True for a record when a value at ``path`` is one of ``values``."""

    path: FieldSelector
    values: frozenset[str]

    def holds(self, record: Any) -> bool:
        return any(isinstance(v, str) and v in self.values for v in self.path.values(record))


@dataclass(frozen=True)
class AuthorisedException:
    """Detections an authorised exception lets stay: of ``categories``, in ``kinds`` and
    ``fields`` (all when empty), in records meeting ``when``, and — when given — only
    addresses in ``networks`` or at ``email_domains``."""

    name: str
    categories: frozenset[Category]
    kinds: tuple[str, ...] = ()
    fields: tuple[FieldSelector, ...] = ()
    when: Condition | None = None
    networks: tuple[IPNetwork, ...] = ()
    email_domains: tuple[str, ...] = ()

    @property
    def unconditional(self) -> bool:
        """Applies anywhere (also to raw rejected lines, where fields are unknown)."""
        return not self.kinds and not self.fields and self.when is None

    def applies_to(self, kind: str) -> bool:
        return not self.kinds or kind in self.kinds

    def allows(self, category: Category, value: str) -> bool:
        """Whether ``value`` (a detection's text) is covered by the value filters, read
        folded as the detectors read it: ``ｅｘａｍｐｌｅ．ｃｏｍ`` is example.com (IDNA
        maps it so too) and ``１９２．０．２．１`` is 192.0.2.1."""
        if category not in self.categories:
            return False
        view = fold(value)
        if view is not None:
            value = view.text
        if category in (Category.IPV4, Category.IPV6) and self.networks:
            try:
                address = ipaddress.ip_address(value)
            except ValueError:
                return False
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            return any(address.version == n.version and address in n for n in self.networks)
        if category is Category.EMAIL and self.email_domains:
            domain = value.rsplit("@", 1)[-1].lower().rstrip(".")
            return any(domain == d or domain.endswith("." + d) for d in self.email_domains)
        return True


@dataclass(frozen=True)
class KindPolicy:
    fields: tuple[FieldSelector, ...]
    code_fields: tuple[FieldSelector, ...] = ()
    evidence_fields: tuple[FieldSelector, ...] = ()
    categories: frozenset[Category] = frozenset(Category)


@dataclass(frozen=True)
class SanitizePolicy:
    version: str
    source: str
    sha256: str
    categories: frozenset[Category]
    phone_regions: tuple[str, ...]
    secret_fields: tuple[str, ...]
    rejected_raw: str
    max_passes: int
    kinds: dict[str, KindPolicy] = field(default_factory=dict)
    exceptions: tuple[AuthorisedException, ...] = ()

    def for_kind(self, kind: str) -> KindPolicy:
        """A kind the policy does not list is scanned whole, for every category: a
        forgotten kind must not pass unscanned."""
        found = self.kinds.get(kind)
        if found is None:
            return KindPolicy((FieldSelector.parse("$"),), categories=self.categories)
        return found

    def check_kinds(self, known: Collection[str]) -> None:
        """Raise :class:`ConfigError` for a record kind the policy names that is not one
        of ``known``: a misspelt ``[kinds.…]`` table was ignored (its kind scanned under
        other settings), a misspelt exception kind let nothing stay."""
        names = ", ".join(sorted(known))
        for kind in self.kinds:
            if kind not in known:
                raise ConfigError(f"policy.kinds.{kind}: unknown record kind (known: {names})")
        for n, exception in enumerate(self.exceptions):
            for i, kind in enumerate(exception.kinds):
                if kind not in known:
                    raise ConfigError(
                        f"policy.exceptions[{n}].kinds[{i}]: unknown record kind {kind!r}"
                        f" (known: {names})"
                    )

    def describe(self) -> dict[str, Any]:
        """What the manifest records: identity and scope, never any matched value."""
        return {
            "policy": self.source,
            "policy_sha256": self.sha256,
            "policy_version": self.version,
            "categories": sorted(c.value for c in self.categories),
            "rejected_raw": self.rejected_raw,
            "kinds": {
                kind: {
                    "fields": [s.text for s in p.fields],
                    "code_fields": [s.text for s in p.code_fields],
                    "evidence_fields": [s.text for s in p.evidence_fields],
                    "categories": sorted(c.value for c in p.categories),
                }
                for kind, p in sorted(self.kinds.items())
            },
            "exceptions": [e.name for e in self.exceptions],
        }


# -- loading ---------------------------------------------------------------------------

_TOP: Final = {
    "version",
    "categories",
    "phone_regions",
    "secret_fields",
    "rejected_raw",
    "max_passes",
    "kinds",
    "exceptions",
}
_KIND: Final = {"fields", "code_fields", "evidence_fields", "categories"}
_EXCEPTION: Final = {"name", "categories", "kinds", "fields", "when", "networks", "email_domains"}


def load_policy(path: Path, pin: str | None = None) -> SanitizePolicy:
    """Read and validate a policy file; ``pin`` is the SHA-256 it must have."""
    data = read_regular(path, f"sanitize.policy: cannot read {path}", error=ConfigError)
    digest = hashlib.sha256(data).hexdigest()
    check_pin(f"sanitize.policy_sha256: {path}", digest, pin, ConfigError)
    return _policy(parse_toml(data, f"sanitize policy {path}"), str(path), digest)


def _policy(table: dict[str, Any], source: str, digest: str) -> SanitizePolicy:
    _known(table, _TOP, "policy")
    categories = _categories(table.get("categories", [c.value for c in Category]), "categories")
    if not categories:
        raise ConfigError(
            "policy.categories: an empty list scans for nothing (a kind without categories of"
            f" its own would pass unscanned); {_OFF}"
        )
    kinds_table = _table(table.get("kinds", {}), "kinds")
    kinds = {
        kind: _kind_policy(_table(entry, f"kinds.{kind}"), f"kinds.{kind}", categories)
        for kind, entry in kinds_table.items()
    }
    rejected_raw = _string(table.get("rejected_raw", REJECTED_RAW_RULES[0]), "rejected_raw")
    if rejected_raw not in REJECTED_RAW_RULES:
        raise ConfigError(
            f"policy.rejected_raw: {rejected_raw!r} is not one of {', '.join(REJECTED_RAW_RULES)}"
        )
    max_passes = table.get("max_passes", 4)
    if not isinstance(max_passes, int) or isinstance(max_passes, bool) or not 1 <= max_passes <= 16:
        raise ConfigError("policy.max_passes: expected an integer from 1 to 16")
    exceptions = [
        _exception(_table(entry, f"exceptions[{i}]"), f"exceptions[{i}]")
        for i, entry in enumerate(_list(table.get("exceptions", []), "exceptions"))
    ]
    names = [e.name for e in exceptions]
    if len(set(names)) != len(names):
        raise ConfigError("policy.exceptions: names must be unique")
    return SanitizePolicy(
        version=_string(table.get("version", "unversioned"), "version"),
        source=source,
        sha256=digest,
        categories=categories,
        phone_regions=_phone_regions(table.get("phone_regions", ["US"]), "phone_regions"),
        secret_fields=_secret_fields(table.get("secret_fields", []), "secret_fields"),
        rejected_raw=rejected_raw,
        max_passes=max_passes,
        kinds=kinds,
        exceptions=tuple(exceptions),
    )


def _kind_policy(table: dict[str, Any], path: str, default: frozenset[Category]) -> KindPolicy:
    _known(table, _KIND, f"policy.{path}")
    fields = _selectors(table.get("fields", ["$"]), f"{path}.fields")
    categories = (
        _categories(table["categories"], f"{path}.categories") if "categories" in table else default
    )
    for key, given in (("fields", fields), ("categories", categories)):
        if not given:
            kind = path.removeprefix("kinds.")
            raise ConfigError(
                f"policy.{path}.{key}: an empty list scans nothing; to let this kind's values"
                f" stay as written, name it in an [[exceptions]] entry (kinds = [{kind!r}],"
                f" every category); {_OFF}"
            )
    return KindPolicy(
        fields=fields,
        code_fields=_selectors(table.get("code_fields", []), f"{path}.code_fields"),
        evidence_fields=_selectors(table.get("evidence_fields", []), f"{path}.evidence_fields"),
        categories=categories,
    )


def _exception(table: dict[str, Any], path: str) -> AuthorisedException:
    _known(table, _EXCEPTION, f"policy.{path}")
    if "name" not in table or "categories" not in table:
        raise ConfigError(f"policy.{path}: needs a name and categories")
    categories = _categories(table["categories"], f"{path}.categories")
    if not categories:
        raise ConfigError(f"policy.{path}.categories: an empty list lets nothing stay")
    when = None
    if "when" in table:
        condition = _table(table["when"], f"{path}.when")
        _known(condition, {"path", "in"}, f"policy.{path}.when")
        if "path" not in condition or "in" not in condition:
            raise ConfigError(f"policy.{path}.when: needs path and in")
        when = Condition(
            _selector(condition["path"], f"{path}.when.path"),
            frozenset(_strings(condition["in"], f"{path}.when.in")),
        )
        if not when.values:
            raise ConfigError(f"policy.{path}.when.in: an empty list matches no record")
    networks = []
    for i, text in enumerate(_strings(table.get("networks", []), f"{path}.networks")):
        try:
            networks.append(ipaddress.ip_network(text))
        except ValueError as exc:
            raise ConfigError(f"policy.{path}.networks[{i}]: {exc}") from None
    return AuthorisedException(
        name=_string(table["name"], f"{path}.name"),
        categories=categories,
        kinds=tuple(_strings(table.get("kinds", []), f"{path}.kinds")),
        fields=_selectors(table.get("fields", []), f"{path}.fields"),
        when=when,
        networks=tuple(networks),
        email_domains=_email_domains(table.get("email_domains", []), f"{path}.email_domains"),
    )


def _email_domains(value: Any, path: str) -> tuple[str, ...]:
    """Domains, lower case without outer dots; one with no label ("", ".") or holding
    '@' or a space would match no address."""
    domains = []
    for i, text in enumerate(_strings(value, path)):
        domain = text.lower().strip(".")
        if not domain or any(c == "@" or c.isspace() for c in domain):
            raise ConfigError(f"policy.{path}[{i}]: {text!r} is not a domain name")
        domains.append(domain)
    return tuple(domains)


#: How to scan nothing on purpose, for the errors that refuse an empty list.
_OFF: Final = "to sanitize nothing, set [sanitize] enabled = false in the campaign config"


def _known(table: dict[str, Any], known: set[str], path: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}: unknown key")


def _table(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"policy.{path}: expected a table")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"policy.{path}: expected an array")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"policy.{path}: expected a string")
    return value


def _strings(value: Any, path: str) -> list[str]:
    return [_string(v, f"{path}[{i}]") for i, v in enumerate(_list(value, path))]


def _phone_regions(value: Any, path: str) -> tuple[str, ...]:
    """Region codes ``phonenumbers`` knows: it reads a number without a +country code
    only in a region it knows, so an unknown one ("UK", "ZZ", "") detects nothing."""
    codes = _strings(value, path)
    for i, code in enumerate(codes):
        if code not in phonenumbers.SUPPORTED_REGIONS:
            hint = {"UK": " (the United Kingdom is 'GB')"}.get(code.upper(), "")
            if not hint and code.upper() in phonenumbers.SUPPORTED_REGIONS:
                hint = f" (upper case: {code.upper()!r})"
            known = ", ".join(sorted(phonenumbers.SUPPORTED_REGIONS))
            raise ConfigError(
                f"policy.{path}[{i}]: {code!r} is not an ISO 3166-1 alpha-2 region code the"
                f" phone library knows{hint} (known: {known})"
            )
    return tuple(codes)


#: A secret name, normalised: words joined by ``_``, the last one not empty. The last
#: word is what the detectors search free text for, so an empty one (``""``, ``"-"``,
#: ``"token_"``) would be found at every offset and the search would never advance.
_SECRET_NAME: Final = re.compile(r"\w*[^\W_]")


def _secret_fields(value: Any, path: str) -> tuple[str, ...]:
    names = _strings(value, path)
    for i, name in enumerate(names):
        if _SECRET_NAME.fullmatch(normalise_name(name)) is None:
            raise ConfigError(
                f"policy.{path}[{i}]: {name!r} is not a field name (letters, digits, '_',"
                " '-', '.' or spaces, ending with a letter or digit)"
            )
    return tuple(names)


def _categories(value: Any, path: str) -> frozenset[Category]:
    found = set()
    for i, name in enumerate(_strings(value, path)):
        try:
            found.add(Category(name))
        except ValueError:
            known = ", ".join(c.value for c in Category)
            raise ConfigError(
                f"policy.{path}[{i}]: unknown category {name!r} (known: {known})"
            ) from None
    return frozenset(found)


def _selector(value: Any, path: str) -> FieldSelector:
    try:
        return FieldSelector.parse(_string(value, path))
    except SelectorError as exc:
        raise ConfigError(f"policy.{path}: {exc}") from None


def _selectors(value: Any, path: str) -> tuple[FieldSelector, ...]:
    items: Sequence[Any] = _list(value, path)
    return tuple(_selector(v, f"{path}[{i}]") for i, v in enumerate(items))
