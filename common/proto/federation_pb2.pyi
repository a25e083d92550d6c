# Generated from proto/privadapt/v1/federation.proto by proto/generate.py; do not edit, regenerate.
import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ParamValue(_message.Message):
    __slots__ = ("double_value", "int_value", "string_value", "bool_value", "tensor_value")
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    TENSOR_VALUE_FIELD_NUMBER: _ClassVar[int]
    double_value: float
    int_value: int
    string_value: str
    bool_value: bool
    tensor_value: Tensor
    def __init__(self, double_value: _Optional[float] = ..., int_value: _Optional[int] = ..., string_value: _Optional[str] = ..., bool_value: _Optional[bool] = ..., tensor_value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class GaussianBlock(_message.Message):
    __slots__ = ("sensitivity", "sigma")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SIGMA_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    sigma: float
    def __init__(self, sensitivity: _Optional[float] = ..., sigma: _Optional[float] = ...) -> None: ...

class Mechanism(_message.Message):
    __slots__ = ("adjacency", "gaussian", "poisson_sampled_gaussian", "laplace", "pure_dp", "zcdp", "no_noise", "report_noisy_laplace", "exponential", "generalized_exponential", "discrete_laplace", "discrete_exponential", "discrete_report_noisy_laplace", "distributed_discrete_gaussian")
    ADJACENCY_FIELD_NUMBER: _ClassVar[int]
    GAUSSIAN_FIELD_NUMBER: _ClassVar[int]
    POISSON_SAMPLED_GAUSSIAN_FIELD_NUMBER: _ClassVar[int]
    LAPLACE_FIELD_NUMBER: _ClassVar[int]
    PURE_DP_FIELD_NUMBER: _ClassVar[int]
    ZCDP_FIELD_NUMBER: _ClassVar[int]
    NO_NOISE_FIELD_NUMBER: _ClassVar[int]
    REPORT_NOISY_LAPLACE_FIELD_NUMBER: _ClassVar[int]
    EXPONENTIAL_FIELD_NUMBER: _ClassVar[int]
    GENERALIZED_EXPONENTIAL_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_LAPLACE_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_EXPONENTIAL_FIELD_NUMBER: _ClassVar[int]
    DISCRETE_REPORT_NOISY_LAPLACE_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTED_DISCRETE_GAUSSIAN_FIELD_NUMBER: _ClassVar[int]
    adjacency: str
    gaussian: GaussianMechanism
    poisson_sampled_gaussian: PoissonSampledGaussianMechanism
    laplace: LaplaceMechanism
    pure_dp: PureDpEvent
    zcdp: ZCdpEvent
    no_noise: NoNoise
    report_noisy_laplace: ReportNoisyMin
    exponential: ExponentialMechanism
    generalized_exponential: GeneralizedExponentialMechanism
    discrete_laplace: DiscreteLaplaceMechanism
    discrete_exponential: DiscreteExponentialMechanism
    discrete_report_noisy_laplace: DiscreteReportNoisyMin
    distributed_discrete_gaussian: DistributedDiscreteGaussianMechanism
    def __init__(self, adjacency: _Optional[str] = ..., gaussian: _Optional[_Union[GaussianMechanism, _Mapping]] = ..., poisson_sampled_gaussian: _Optional[_Union[PoissonSampledGaussianMechanism, _Mapping]] = ..., laplace: _Optional[_Union[LaplaceMechanism, _Mapping]] = ..., pure_dp: _Optional[_Union[PureDpEvent, _Mapping]] = ..., zcdp: _Optional[_Union[ZCdpEvent, _Mapping]] = ..., no_noise: _Optional[_Union[NoNoise, _Mapping]] = ..., report_noisy_laplace: _Optional[_Union[ReportNoisyMin, _Mapping]] = ..., exponential: _Optional[_Union[ExponentialMechanism, _Mapping]] = ..., generalized_exponential: _Optional[_Union[GeneralizedExponentialMechanism, _Mapping]] = ..., discrete_laplace: _Optional[_Union[DiscreteLaplaceMechanism, _Mapping]] = ..., discrete_exponential: _Optional[_Union[DiscreteExponentialMechanism, _Mapping]] = ..., discrete_report_noisy_laplace: _Optional[_Union[DiscreteReportNoisyMin, _Mapping]] = ..., distributed_discrete_gaussian: _Optional[_Union[DistributedDiscreteGaussianMechanism, _Mapping]] = ...) -> None: ...

class GaussianMechanism(_message.Message):
    __slots__ = ("blocks", "local_blocks")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[GaussianBlock]
    local_blocks: _containers.RepeatedCompositeFieldContainer[GaussianBlock]
    def __init__(self, blocks: _Optional[_Iterable[_Union[GaussianBlock, _Mapping]]] = ..., local_blocks: _Optional[_Iterable[_Union[GaussianBlock, _Mapping]]] = ...) -> None: ...

class PoissonSampledGaussianMechanism(_message.Message):
    __slots__ = ("blocks", "sampling_rate")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_RATE_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[GaussianBlock]
    sampling_rate: float
    def __init__(self, blocks: _Optional[_Iterable[_Union[GaussianBlock, _Mapping]]] = ..., sampling_rate: _Optional[float] = ...) -> None: ...

class LaplaceMechanism(_message.Message):
    __slots__ = ("sensitivity", "scale")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    scale: float
    def __init__(self, sensitivity: _Optional[float] = ..., scale: _Optional[float] = ...) -> None: ...

class DiscreteLaplaceMechanism(_message.Message):
    __slots__ = ("sensitivity", "scale_steps", "fractional_bits")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SCALE_STEPS_FIELD_NUMBER: _ClassVar[int]
    FRACTIONAL_BITS_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    scale_steps: float
    fractional_bits: int
    def __init__(self, sensitivity: _Optional[float] = ..., scale_steps: _Optional[float] = ..., fractional_bits: _Optional[int] = ...) -> None: ...

class DistributedDiscreteGaussianMechanism(_message.Message):
    __slots__ = ("sensitivity", "share_sigma_squared", "honest_shares", "fractional_bits")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SHARE_SIGMA_SQUARED_FIELD_NUMBER: _ClassVar[int]
    HONEST_SHARES_FIELD_NUMBER: _ClassVar[int]
    FRACTIONAL_BITS_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    share_sigma_squared: float
    honest_shares: int
    fractional_bits: int
    def __init__(self, sensitivity: _Optional[float] = ..., share_sigma_squared: _Optional[float] = ..., honest_shares: _Optional[int] = ..., fractional_bits: _Optional[int] = ...) -> None: ...

class PureDpEvent(_message.Message):
    __slots__ = ("epsilon",)
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    epsilon: float
    def __init__(self, epsilon: _Optional[float] = ...) -> None: ...

class ZCdpEvent(_message.Message):
    __slots__ = ("rho",)
    RHO_FIELD_NUMBER: _ClassVar[int]
    rho: float
    def __init__(self, rho: _Optional[float] = ...) -> None: ...

class NoNoise(_message.Message):
    __slots__ = ("sensitivities",)
    SENSITIVITIES_FIELD_NUMBER: _ClassVar[int]
    sensitivities: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, sensitivities: _Optional[_Iterable[float]] = ...) -> None: ...

class ReportNoisyMin(_message.Message):
    __slots__ = ("sensitivity", "scale", "minimize", "monotone")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MINIMIZE_FIELD_NUMBER: _ClassVar[int]
    MONOTONE_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    scale: float
    minimize: bool
    monotone: bool
    def __init__(self, sensitivity: _Optional[float] = ..., scale: _Optional[float] = ..., minimize: _Optional[bool] = ..., monotone: _Optional[bool] = ...) -> None: ...

class ExponentialMechanism(_message.Message):
    __slots__ = ("sensitivity", "epsilon", "minimize", "monotone")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    MINIMIZE_FIELD_NUMBER: _ClassVar[int]
    MONOTONE_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    epsilon: float
    minimize: bool
    monotone: bool
    def __init__(self, sensitivity: _Optional[float] = ..., epsilon: _Optional[float] = ..., minimize: _Optional[bool] = ..., monotone: _Optional[bool] = ...) -> None: ...

class DiscreteExponentialMechanism(_message.Message):
    __slots__ = ("sensitivity", "epsilon", "fractional_bits", "minimize", "monotone")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    FRACTIONAL_BITS_FIELD_NUMBER: _ClassVar[int]
    MINIMIZE_FIELD_NUMBER: _ClassVar[int]
    MONOTONE_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    epsilon: float
    fractional_bits: int
    minimize: bool
    monotone: bool
    def __init__(self, sensitivity: _Optional[float] = ..., epsilon: _Optional[float] = ..., fractional_bits: _Optional[int] = ..., minimize: _Optional[bool] = ..., monotone: _Optional[bool] = ...) -> None: ...

class DiscreteReportNoisyMin(_message.Message):
    __slots__ = ("sensitivity", "scale_steps", "fractional_bits", "minimize", "monotone")
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    SCALE_STEPS_FIELD_NUMBER: _ClassVar[int]
    FRACTIONAL_BITS_FIELD_NUMBER: _ClassVar[int]
    MINIMIZE_FIELD_NUMBER: _ClassVar[int]
    MONOTONE_FIELD_NUMBER: _ClassVar[int]
    sensitivity: float
    scale_steps: float
    fractional_bits: int
    minimize: bool
    monotone: bool
    def __init__(self, sensitivity: _Optional[float] = ..., scale_steps: _Optional[float] = ..., fractional_bits: _Optional[int] = ..., minimize: _Optional[bool] = ..., monotone: _Optional[bool] = ...) -> None: ...

class GeneralizedExponentialMechanism(_message.Message):
    __slots__ = ("sensitivities", "epsilon", "beta", "minimize")
    SENSITIVITIES_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    MINIMIZE_FIELD_NUMBER: _ClassVar[int]
    sensitivities: _containers.RepeatedScalarFieldContainer[float]
    epsilon: float
    beta: float
    minimize: bool
    def __init__(self, sensitivities: _Optional[_Iterable[float]] = ..., epsilon: _Optional[float] = ..., beta: _Optional[float] = ..., minimize: _Optional[bool] = ...) -> None: ...

class Query(_message.Message):
    __slots__ = ("job_id", "round", "query_id", "kernel", "params", "mechanism", "collusion_tolerance", "fractional_bits", "form", "records")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ParamValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ParamValue, _Mapping]] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    COLLUSION_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    FRACTIONAL_BITS_FIELD_NUMBER: _ClassVar[int]
    FORM_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    kernel: str
    params: _containers.MessageMap[str, ParamValue]
    mechanism: Mechanism
    collusion_tolerance: int
    fractional_bits: int
    form: str
    records: RecordPart
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ..., kernel: _Optional[str] = ..., params: _Optional[_Mapping[str, ParamValue]] = ..., mechanism: _Optional[_Union[Mechanism, _Mapping]] = ..., collusion_tolerance: _Optional[int] = ..., fractional_bits: _Optional[int] = ..., form: _Optional[str] = ..., records: _Optional[_Union[RecordPart, _Mapping]] = ...) -> None: ...

class RecordPart(_message.Message):
    __slots__ = ("part", "validation_fraction", "salt")
    PART_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FRACTION_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    part: str
    validation_fraction: float
    salt: str
    def __init__(self, part: _Optional[str] = ..., validation_fraction: _Optional[float] = ..., salt: _Optional[str] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("site_name", "software_version", "num_records", "num_features", "kernels", "policy_version", "adjacency", "schema", "budget", "terms")
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    SOFTWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_RECORDS_FIELD_NUMBER: _ClassVar[int]
    NUM_FEATURES_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADJACENCY_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    TERMS_FIELD_NUMBER: _ClassVar[int]
    site_name: str
    software_version: str
    num_records: int
    num_features: int
    kernels: _containers.RepeatedScalarFieldContainer[str]
    policy_version: str
    adjacency: str
    schema: SchemaDigest
    budget: SiteBudget
    terms: SitePolicyTerms
    def __init__(self, site_name: _Optional[str] = ..., software_version: _Optional[str] = ..., num_records: _Optional[int] = ..., num_features: _Optional[int] = ..., kernels: _Optional[_Iterable[str]] = ..., policy_version: _Optional[str] = ..., adjacency: _Optional[str] = ..., schema: _Optional[_Union[SchemaDigest, _Mapping]] = ..., budget: _Optional[_Union[SiteBudget, _Mapping]] = ..., terms: _Optional[_Union[SitePolicyTerms, _Mapping]] = ...) -> None: ...

class SitePolicyTerms(_message.Message):
    __slots__ = ("peers_listed", "peers", "min_participants", "collusion_tolerance", "max_query_work", "max_job_work")
    PEERS_LISTED_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    MIN_PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    COLLUSION_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    MAX_QUERY_WORK_FIELD_NUMBER: _ClassVar[int]
    MAX_JOB_WORK_FIELD_NUMBER: _ClassVar[int]
    peers_listed: bool
    peers: _containers.RepeatedScalarFieldContainer[str]
    min_participants: int
    collusion_tolerance: int
    max_query_work: float
    max_job_work: float
    def __init__(self, peers_listed: _Optional[bool] = ..., peers: _Optional[_Iterable[str]] = ..., min_participants: _Optional[int] = ..., collusion_tolerance: _Optional[int] = ..., max_query_work: _Optional[float] = ..., max_job_work: _Optional[float] = ...) -> None: ...

class SiteBudget(_message.Message):
    __slots__ = ("epsilon_cap", "delta_cap", "epsilon_spent", "accounting")
    EPSILON_CAP_FIELD_NUMBER: _ClassVar[int]
    DELTA_CAP_FIELD_NUMBER: _ClassVar[int]
    EPSILON_SPENT_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTING_FIELD_NUMBER: _ClassVar[int]
    epsilon_cap: float
    delta_cap: float
    epsilon_spent: float
    accounting: str
    def __init__(self, epsilon_cap: _Optional[float] = ..., delta_cap: _Optional[float] = ..., epsilon_spent: _Optional[float] = ..., accounting: _Optional[str] = ...) -> None: ...

class SchemaField(_message.Message):
    __slots__ = ("name", "digest")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    digest: str
    def __init__(self, name: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class SchemaDigest(_message.Message):
    __slots__ = ("digest", "fields", "from_schema_file")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    FROM_SCHEMA_FILE_FIELD_NUMBER: _ClassVar[int]
    digest: str
    fields: _containers.RepeatedCompositeFieldContainer[SchemaField]
    from_schema_file: bool
    def __init__(self, digest: _Optional[str] = ..., fields: _Optional[_Iterable[_Union[SchemaField, _Mapping]]] = ..., from_schema_file: _Optional[bool] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("session_id", "heartbeat_interval", "max_message_bytes", "coordinator_name")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_NAME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    heartbeat_interval: _duration_pb2.Duration
    max_message_bytes: int
    coordinator_name: str
    def __init__(self, session_id: _Optional[str] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_message_bytes: _Optional[int] = ..., coordinator_name: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("site_name", "session_id", "active_job_ids", "budget")
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    site_name: str
    session_id: str
    active_job_ids: _containers.RepeatedScalarFieldContainer[str]
    budget: SiteBudget
    def __init__(self, site_name: _Optional[str] = ..., session_id: _Optional[str] = ..., active_job_ids: _Optional[_Iterable[str]] = ..., budget: _Optional[_Union[SiteBudget, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("next_interval", "session_known")
    NEXT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    SESSION_KNOWN_FIELD_NUMBER: _ClassVar[int]
    next_interval: _duration_pb2.Duration
    session_known: bool
    def __init__(self, next_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., session_known: _Optional[bool] = ...) -> None: ...

class JobProgress(_message.Message):
    __slots__ = ("job_id", "last_closed_round")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_CLOSED_ROUND_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    last_closed_round: int
    def __init__(self, job_id: _Optional[str] = ..., last_closed_round: _Optional[int] = ...) -> None: ...

class ConnectRequest(_message.Message):
    __slots__ = ("site_name", "session_id", "jobs")
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    site_name: str
    session_id: str
    jobs: _containers.RepeatedCompositeFieldContainer[JobProgress]
    def __init__(self, site_name: _Optional[str] = ..., session_id: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[JobProgress, _Mapping]]] = ...) -> None: ...

class JobStart(_message.Message):
    __slots__ = ("job_id", "algorithm", "collusion_tolerance", "min_participants", "participants")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    COLLUSION_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    MIN_PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    algorithm: str
    collusion_tolerance: int
    min_participants: int
    participants: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., collusion_tolerance: _Optional[int] = ..., min_participants: _Optional[int] = ..., participants: _Optional[_Iterable[str]] = ...) -> None: ...

class RoundAnnouncement(_message.Message):
    __slots__ = ("job_id", "round", "query_id", "query", "deadline", "fractional_bits")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    FRACTIONAL_BITS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    query: Query
    deadline: _timestamp_pb2.Timestamp
    fractional_bits: int
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ..., query: _Optional[_Union[Query, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fractional_bits: _Optional[int] = ...) -> None: ...

class KeyAnnouncement(_message.Message):
    __slots__ = ("job_id", "round", "query_id", "site_name", "public_key", "signature", "certificate_pem", "query_digest", "check_public_key")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    QUERY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CHECK_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    site_name: str
    public_key: bytes
    signature: bytes
    certificate_pem: bytes
    query_digest: bytes
    check_public_key: bytes
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ..., site_name: _Optional[str] = ..., public_key: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., certificate_pem: _Optional[bytes] = ..., query_digest: _Optional[bytes] = ..., check_public_key: _Optional[bytes] = ...) -> None: ...

class Roster(_message.Message):
    __slots__ = ("job_id", "round", "query_id", "keys")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    keys: _containers.RepeatedCompositeFieldContainer[KeyAnnouncement]
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[KeyAnnouncement, _Mapping]]] = ...) -> None: ...

class RoundAbort(_message.Message):
    __slots__ = ("job_id", "round", "query_id", "reason", "missing_sites")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MISSING_SITES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    reason: str
    missing_sites: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ..., reason: _Optional[str] = ..., missing_sites: _Optional[_Iterable[str]] = ...) -> None: ...

class JobEnd(_message.Message):
    __slots__ = ("job_id", "state", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: JobState
    message: str
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., message: _Optional[str] = ...) -> None: ...

class PrivacyReportRequest(_message.Message):
    __slots__ = ("job_id", "delta")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    delta: float
    def __init__(self, job_id: _Optional[str] = ..., delta: _Optional[float] = ...) -> None: ...

class WorkItem(_message.Message):
    __slots__ = ("sequence", "job_start", "round_announcement", "roster", "round_abort", "job_end", "privacy_report_request")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    JOB_START_FIELD_NUMBER: _ClassVar[int]
    ROUND_ANNOUNCEMENT_FIELD_NUMBER: _ClassVar[int]
    ROSTER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ABORT_FIELD_NUMBER: _ClassVar[int]
    JOB_END_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_REPORT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    job_start: JobStart
    round_announcement: RoundAnnouncement
    roster: Roster
    round_abort: RoundAbort
    job_end: JobEnd
    privacy_report_request: PrivacyReportRequest
    def __init__(self, sequence: _Optional[int] = ..., job_start: _Optional[_Union[JobStart, _Mapping]] = ..., round_announcement: _Optional[_Union[RoundAnnouncement, _Mapping]] = ..., roster: _Optional[_Union[Roster, _Mapping]] = ..., round_abort: _Optional[_Union[RoundAbort, _Mapping]] = ..., job_end: _Optional[_Union[JobEnd, _Mapping]] = ..., privacy_report_request: _Optional[_Union[PrivacyReportRequest, _Mapping]] = ...) -> None: ...

class MaskedShare(_message.Message):
    __slots__ = ("job_id", "round", "query_id", "site_name", "blocks", "fractional_bits", "roster_sites", "job_epsilon", "check_private_key")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FRACTIONAL_BITS_FIELD_NUMBER: _ClassVar[int]
    ROSTER_SITES_FIELD_NUMBER: _ClassVar[int]
    JOB_EPSILON_FIELD_NUMBER: _ClassVar[int]
    CHECK_PRIVATE_KEY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    site_name: str
    blocks: _containers.RepeatedCompositeFieldContainer[Tensor]
    fractional_bits: int
    roster_sites: _containers.RepeatedScalarFieldContainer[str]
    job_epsilon: float
    check_private_key: bytes
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ..., site_name: _Optional[str] = ..., blocks: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., fractional_bits: _Optional[int] = ..., roster_sites: _Optional[_Iterable[str]] = ..., job_epsilon: _Optional[float] = ..., check_private_key: _Optional[bytes] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("job_id", "round", "query_id", "site_name", "reason", "message", "last_round")
    class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REASON_UNSPECIFIED: _ClassVar[Refusal.Reason]
        POLICY: _ClassVar[Refusal.Reason]
        BUDGET_EXHAUSTED: _ClassVar[Refusal.Reason]
        ROSTER_INVALID: _ClassVar[Refusal.Reason]
        REPLAY: _ClassVar[Refusal.Reason]
        INTERNAL: _ClassVar[Refusal.Reason]
    REASON_UNSPECIFIED: Refusal.Reason
    POLICY: Refusal.Reason
    BUDGET_EXHAUSTED: Refusal.Reason
    ROSTER_INVALID: Refusal.Reason
    REPLAY: Refusal.Reason
    INTERNAL: Refusal.Reason
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_ROUND_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    site_name: str
    reason: Refusal.Reason
    message: str
    last_round: int
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ..., site_name: _Optional[str] = ..., reason: _Optional[_Union[Refusal.Reason, str]] = ..., message: _Optional[str] = ..., last_round: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("job_id", "round", "query_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    query_id: str
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., query_id: _Optional[str] = ...) -> None: ...

class SitePrivacyReport(_message.Message):
    __slots__ = ("job_id", "site_name", "job_epsilon", "total_epsilon", "delta", "method", "cap_epsilon", "mechanisms", "total_delta", "total_method")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_EPSILON_FIELD_NUMBER: _ClassVar[int]
    TOTAL_EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    CAP_EPSILON_FIELD_NUMBER: _ClassVar[int]
    MECHANISMS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_METHOD_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    site_name: str
    job_epsilon: float
    total_epsilon: float
    delta: float
    method: str
    cap_epsilon: float
    mechanisms: _containers.RepeatedCompositeFieldContainer[Mechanism]
    total_delta: float
    total_method: str
    def __init__(self, job_id: _Optional[str] = ..., site_name: _Optional[str] = ..., job_epsilon: _Optional[float] = ..., total_epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., method: _Optional[str] = ..., cap_epsilon: _Optional[float] = ..., mechanisms: _Optional[_Iterable[_Union[Mechanism, _Mapping]]] = ..., total_delta: _Optional[float] = ..., total_method: _Optional[str] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("algorithm", "hyperparameters", "epsilon", "delta", "sites", "collusion_tolerance", "min_participants", "calibration", "seed", "allow_large_delta")
    class HyperparametersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ParamValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ParamValue, _Mapping]] = ...) -> None: ...
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    HYPERPARAMETERS_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    SITES_FIELD_NUMBER: _ClassVar[int]
    COLLUSION_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    MIN_PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ALLOW_LARGE_DELTA_FIELD_NUMBER: _ClassVar[int]
    algorithm: str
    hyperparameters: _containers.MessageMap[str, ParamValue]
    epsilon: float
    delta: float
    sites: _containers.RepeatedScalarFieldContainer[str]
    collusion_tolerance: int
    min_participants: int
    calibration: str
    seed: int
    allow_large_delta: bool
    def __init__(self, algorithm: _Optional[str] = ..., hyperparameters: _Optional[_Mapping[str, ParamValue]] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., sites: _Optional[_Iterable[str]] = ..., collusion_tolerance: _Optional[int] = ..., min_participants: _Optional[int] = ..., calibration: _Optional[str] = ..., seed: _Optional[int] = ..., allow_large_delta: _Optional[bool] = ...) -> None: ...

class LaunchRequest(_message.Message):
    __slots__ = ("spec", "job_id", "dry_run")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    job_id: str
    dry_run: bool
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., job_id: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class LaunchResponse(_message.Message):
    __slots__ = ("job_id", "plan")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    plan: str
    def __init__(self, job_id: _Optional[str] = ..., plan: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class RoundProgress(_message.Message):
    __slots__ = ("round", "query_id", "participants", "duration", "epsilon_so_far", "aborted", "abort_reason")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANTS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EPSILON_SO_FAR_FIELD_NUMBER: _ClassVar[int]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    ABORT_REASON_FIELD_NUMBER: _ClassVar[int]
    round: int
    query_id: str
    participants: _containers.RepeatedScalarFieldContainer[str]
    duration: _duration_pb2.Duration
    epsilon_so_far: float
    aborted: bool
    abort_reason: str
    def __init__(self, round: _Optional[int] = ..., query_id: _Optional[str] = ..., participants: _Optional[_Iterable[str]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., epsilon_so_far: _Optional[float] = ..., aborted: _Optional[bool] = ..., abort_reason: _Optional[str] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "algorithm", "state", "rounds", "message", "created", "updated", "planned_rounds")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    PLANNED_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    algorithm: str
    state: JobState
    rounds: _containers.RepeatedCompositeFieldContainer[RoundProgress]
    message: str
    created: _timestamp_pb2.Timestamp
    updated: _timestamp_pb2.Timestamp
    planned_rounds: int
    def __init__(self, job_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., rounds: _Optional[_Iterable[_Union[RoundProgress, _Mapping]]] = ..., message: _Optional[str] = ..., created: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., planned_rounds: _Optional[int] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("time", "event", "site_name", "detail")
    TIME_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    event: str
    site_name: str
    detail: str
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., event: _Optional[str] = ..., site_name: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class JobLog(_message.Message):
    __slots__ = ("status", "events")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    status: JobStatus
    events: _containers.RepeatedCompositeFieldContainer[JobEvent]
    def __init__(self, status: _Optional[_Union[JobStatus, _Mapping]] = ..., events: _Optional[_Iterable[_Union[JobEvent, _Mapping]]] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: JobState
    def __init__(self, state: _Optional[_Union[JobState, str]] = ...) -> None: ...

class ResultRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ResultResponse(_message.Message):
    __slots__ = ("job_id", "state", "model", "privacy", "privacy_report_json", "schema_digest", "feature_names")
    class ModelEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ParamValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ParamValue, _Mapping]] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_REPORT_JSON_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_DIGEST_FIELD_NUMBER: _ClassVar[int]
    FEATURE_NAMES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: JobState
    model: _containers.MessageMap[str, ParamValue]
    privacy: _containers.RepeatedCompositeFieldContainer[SitePrivacyReport]
    privacy_report_json: str
    schema_digest: str
    feature_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., model: _Optional[_Mapping[str, ParamValue]] = ..., privacy: _Optional[_Iterable[_Union[SitePrivacyReport, _Mapping]]] = ..., privacy_report_json: _Optional[str] = ..., schema_digest: _Optional[str] = ..., feature_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ListSitesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SiteInfo(_message.Message):
    __slots__ = ("site_name", "connected", "last_seen", "num_records", "kernels", "active_job_ids", "certificate_expiry", "budget", "adjacency")
    SITE_NAME_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    NUM_RECORDS_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    ADJACENCY_FIELD_NUMBER: _ClassVar[int]
    site_name: str
    connected: bool
    last_seen: _timestamp_pb2.Timestamp
    num_records: int
    kernels: _containers.RepeatedScalarFieldContainer[str]
    active_job_ids: _containers.RepeatedScalarFieldContainer[str]
    certificate_expiry: _timestamp_pb2.Timestamp
    budget: SiteBudget
    adjacency: str
    def __init__(self, site_name: _Optional[str] = ..., connected: _Optional[bool] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., num_records: _Optional[int] = ..., kernels: _Optional[_Iterable[str]] = ..., active_job_ids: _Optional[_Iterable[str]] = ..., certificate_expiry: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., budget: _Optional[_Union[SiteBudget, _Mapping]] = ..., adjacency: _Optional[str] = ...) -> None: ...

class ListSitesResponse(_message.Message):
    __slots__ = ("sites",)
    SITES_FIELD_NUMBER: _ClassVar[int]
    sites: _containers.RepeatedCompositeFieldContainer[SiteInfo]
    def __init__(self, sites: _Optional[_Iterable[_Union[SiteInfo, _Mapping]]] = ...) -> None: ...
