"""Every field a site sends the coordinator, checked against sane public
bounds before the coordinator stores or acts on it: the mirror of
``client/coordinator_replies`` for the other direction.

A site certificate is enough to send any value a field can hold. Before these
checks, ``num_records`` 2^64 - 1 at Register raised a raw ``OverflowError``
out of SQLite; ``last_closed_round`` 2^63 - 1 at Connect made the job's next
round 2^63, which the store cannot hold, and failed the job; and 38 MiB of
kernel names per registration were stored and made every ``privadapt sites``
reply too large to send, across restarts. Each check
raises :class:`~privadapt.common.errors.WireError`, which the handlers turn
into INVALID_ARGUMENT naming the field: an out-of-range value is the sending
site's error and changes nothing on the coordinator.
"""

from __future__ import annotations

import math
import re

from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import WireError
from privadapt.common.mechanisms import Adjacency
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.fields import MAX_ROUND, check_name, check_round

#: Largest record count a site may declare: counts are used as floats (weights
#: n_k / n), exact only up to 2^53.
MAX_RECORDS = 2**53
#: Largest record dimension: a d-vector is 8 d bytes and the d x d kernels need
#: far less than this to exceed the message limit.
MAX_FEATURES = 2**20
#: A site lists the kernels its policy allows: at most this many names ...
MAX_KERNELS = 64
#: A site's policy names at most this many peers (sites it masks with).
MAX_PEERS = 1024
#: ... of at most this many characters, each a Python-identifier-like name.
MAX_KERNEL_NAME_CHARS = 64
KERNEL_NAME = re.compile(r"[a-z][a-z0-9_]*")
#: Free-text registration fields (software and policy versions).
MAX_VERSION_CHARS = 128
#: A schema digest lists at most this many fields (a few per column) ...
MAX_SCHEMA_FIELDS = 4096
#: ... each named in at most this many characters.
MAX_SCHEMA_FIELD_CHARS = 512
HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
#: Jobs a site may report progress for in one ConnectRequest.
MAX_JOBS_PER_CONNECT = 1024
#: Sites a share's roster may list (a coordinator serves a few hundred).
MAX_ROSTER_SITES = 1024
#: Highest round a site may claim to have seen. Half the stored range: a job
#: resumed above any accepted claim still has 2^62 rounds before the store's
#: limit, so no claim can make a job run out of round numbers.
MAX_CLAIMED_ROUND = (MAX_ROUND + 1) // 2


def check_register_request(request: pb.RegisterRequest) -> None:
    """Validate a registration before it is stored or used."""
    if request.num_records > MAX_RECORDS:
        raise WireError(f"num_records {request.num_records} is above 2^53 (the largest count "
                        "the coordinator computes with exactly)")
    if request.num_features > MAX_FEATURES:
        raise WireError(f"num_features {request.num_features} is above 2^20")
    check_name(request.software_version, "software_version", required=False,
               max_chars=MAX_VERSION_CHARS)
    check_name(request.policy_version, "policy_version", required=False,
               max_chars=MAX_VERSION_CHARS)
    adjacencies = [a.value for a in Adjacency]
    if request.adjacency and request.adjacency not in adjacencies:
        raise WireError(f"adjacency {request.adjacency[:MAX_KERNEL_NAME_CHARS]!r} is not one "
                        f"of {adjacencies}")
    check_kernel_names(request.kernels)
    if request.HasField("schema"):
        check_schema_digest(request.schema)
    if request.HasField("budget"):
        check_site_budget(request.budget)
    if request.HasField("terms"):
        check_policy_terms(request.terms)


def check_policy_terms(terms: pb.SitePolicyTerms) -> None:
    """At most MAX_PEERS distinct, well-formed peer names (none unless
    ``peers_listed``); a minimum of at most MAX_PEERS + 1 participants."""
    if len(terms.peers) > MAX_PEERS:
        raise WireError(f"terms.peers lists {len(terms.peers)} sites (at most {MAX_PEERS})")
    if terms.peers and not terms.peers_listed:
        raise WireError("terms.peers is given but terms.peers_listed is false")
    if len(set(terms.peers)) != len(terms.peers):
        raise WireError("terms.peers names a site twice")
    for peer in terms.peers:
        check_name(peer, "terms.peers entry")
    if terms.min_participants > MAX_PEERS + 1:
        raise WireError(f"terms.min_participants {terms.min_participants} is above "
                        f"{MAX_PEERS + 1}")


def check_site_budget(budget: pb.SiteBudget) -> None:
    """A budget a ledger could state: a positive cap (inf only at a
    simulation site), a delta in (0, 1), a spend that is a number >= 0 (inf
    after a non-private release), a known accounting method. It is shown to
    operators and can only make a launch be refused (server/jobs/privacy_plan.py)."""
    if math.isnan(budget.epsilon_cap) or budget.epsilon_cap <= 0:
        raise WireError(f"budget.epsilon_cap must be > 0, got {budget.epsilon_cap}")
    if not 0 < budget.delta_cap < 1:
        raise WireError(f"budget.delta_cap must be in (0, 1), got {budget.delta_cap}")
    if math.isnan(budget.epsilon_spent) or budget.epsilon_spent < 0:
        raise WireError(f"budget.epsilon_spent must be >= 0, got {budget.epsilon_spent}")
    methods = [m.value for m in AccountingMethod]
    if budget.accounting not in methods:
        raise WireError(f"budget.accounting {budget.accounting[:MAX_KERNEL_NAME_CHARS]!r} is "
                        f"not one of {methods}")


def check_schema_digest(message: pb.SchemaDigest) -> None:
    """A bounded list of distinct, named fields with well-formed digests whose
    overall digest is theirs (common/data/schema_digest.py)."""
    if len(message.fields) > MAX_SCHEMA_FIELDS:
        raise WireError(f"schema.fields lists {len(message.fields)} fields (at most "
                        f"{MAX_SCHEMA_FIELDS})")
    names = [check_name(f.name, "schema.fields.name", max_chars=MAX_SCHEMA_FIELD_CHARS)
             for f in message.fields]
    if len(set(names)) != len(names):
        raise WireError("schema.fields names a field twice")
    if not all(HEX_DIGEST.fullmatch(d) for d in [message.digest, *(f.digest for f in
                                                                   message.fields)]):
        raise WireError("schema digests must be 64 lower-case hex characters (SHA-256)")
    try:
        SchemaDigest.from_proto(message)
    except ValueError as err:
        raise WireError(f"schema.digest: {err}") from None


def check_kernel_names(kernels: list[str] | tuple[str, ...]) -> None:
    """At most MAX_KERNELS distinct, well-formed names of at most
    MAX_KERNEL_NAME_CHARS characters (a name is echoed back only truncated)."""
    if len(kernels) > MAX_KERNELS:
        raise WireError(f"{len(kernels)} kernel names (at most {MAX_KERNELS})")
    for kernel in kernels:
        if len(kernel) > MAX_KERNEL_NAME_CHARS:
            raise WireError(f"a kernel name has {len(kernel)} characters "
                            f"(at most {MAX_KERNEL_NAME_CHARS})")
        if not KERNEL_NAME.fullmatch(kernel):
            raise WireError(f"kernel name {kernel!r} is not a name like 'linear_gradient' "
                            "(lower-case letters, digits and '_')")
    if len(set(kernels)) != len(kernels):
        raise WireError("kernel names repeat")


def check_connect_request(request: pb.ConnectRequest) -> None:
    """Validate a Connect: the jobs a site reports and the rounds it has closed."""
    check_name(request.session_id, "session_id")
    if len(request.jobs) > MAX_JOBS_PER_CONNECT:
        raise WireError(f"progress for {len(request.jobs)} jobs (at most "
                        f"{MAX_JOBS_PER_CONNECT})")
    for progress in request.jobs:
        check_name(progress.job_id, "jobs.job_id")
        check_round(progress.last_closed_round, f"job {progress.job_id!r} last_closed_round",
                    low=0, high=MAX_CLAIMED_ROUND)


def check_heartbeat_request(request: pb.HeartbeatRequest) -> None:
    check_name(request.session_id, "session_id")
    if len(request.active_job_ids) > MAX_JOBS_PER_CONNECT:
        raise WireError(f"{len(request.active_job_ids)} active job ids (at most "
                        f"{MAX_JOBS_PER_CONNECT})")
    for job_id in request.active_job_ids:
        check_name(job_id, "active_job_ids")
    if request.HasField("budget"):
        check_site_budget(request.budget)


def check_round_message(message: pb.KeyAnnouncement | pb.MaskedShare | pb.Refusal) -> None:
    """The envelope of a site's reply in a round: ids and round numbers (the
    content is checked where the round engine takes it)."""
    check_name(message.job_id, "job_id")
    check_name(message.query_id, "query_id")
    check_round(message.round, "round")
    if isinstance(message, pb.Refusal):
        check_round(message.last_round, "last_round", low=0, high=MAX_CLAIMED_ROUND)
    if isinstance(message, pb.MaskedShare):
        if len(message.roster_sites) > MAX_ROSTER_SITES:
            raise WireError(f"roster_sites lists {len(message.roster_sites)} sites")
        for name in message.roster_sites:
            check_name(name, "roster_sites")
