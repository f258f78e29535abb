from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job_id", "already")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALREADY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    already: bool
    def __init__(self, job_id: _Optional[str] = ..., already: _Optional[bool] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("spec_json",)
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    spec_json: bytes
    def __init__(self, spec_json: _Optional[bytes] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job_id", "job_digest")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("spec_json", "job_digest", "closed")
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    spec_json: bytes
    job_digest: str
    closed: bool
    def __init__(self, spec_json: _Optional[bytes] = ..., job_digest: _Optional[str] = ..., closed: _Optional[bool] = ...) -> None: ...

class BatchHeader(_message.Message):
    __slots__ = ("job_id", "job_digest", "party_id", "batch_index", "start", "stop", "columns", "shape", "server_index", "seed", "data_sha256", "randomness_mode", "aggregate")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PARTY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    SERVER_INDEX_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DATA_SHA256_FIELD_NUMBER: _ClassVar[int]
    RANDOMNESS_MODE_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    party_id: str
    batch_index: int
    start: int
    stop: int
    columns: _containers.RepeatedScalarFieldContainer[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    server_index: int
    seed: bytes
    data_sha256: bytes
    randomness_mode: str
    aggregate: bool
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ..., party_id: _Optional[str] = ..., batch_index: _Optional[int] = ..., start: _Optional[int] = ..., stop: _Optional[int] = ..., columns: _Optional[_Iterable[int]] = ..., shape: _Optional[_Iterable[int]] = ..., server_index: _Optional[int] = ..., seed: _Optional[bytes] = ..., data_sha256: _Optional[bytes] = ..., randomness_mode: _Optional[str] = ..., aggregate: _Optional[bool] = ...) -> None: ...

class UploadChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: BatchHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[BatchHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadReceipt(_message.Message):
    __slots__ = ("job_id", "party_id", "batch_index", "content_digest", "clients", "bytes_received")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    party_id: str
    batch_index: int
    content_digest: str
    clients: int
    bytes_received: int
    def __init__(self, job_id: _Optional[str] = ..., party_id: _Optional[str] = ..., batch_index: _Optional[int] = ..., content_digest: _Optional[str] = ..., clients: _Optional[int] = ..., bytes_received: _Optional[int] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ("job_id", "job_digest")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ...) -> None: ...

class CloseResponse(_message.Message):
    __slots__ = ("n", "held", "seeded_parties", "held_ranges")
    N_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    SEEDED_PARTIES_FIELD_NUMBER: _ClassVar[int]
    HELD_RANGES_FIELD_NUMBER: _ClassVar[int]
    n: int
    held: int
    seeded_parties: _containers.RepeatedScalarFieldContainer[str]
    held_ranges: bytes
    def __init__(self, n: _Optional[int] = ..., held: _Optional[int] = ..., seeded_parties: _Optional[_Iterable[str]] = ..., held_ranges: _Optional[bytes] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("job_id", "job_digest", "participant_ranges")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PARTICIPANT_RANGES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    participant_ranges: bytes
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ..., participant_ranges: _Optional[bytes] = ...) -> None: ...

class ReleaseHeader(_message.Message):
    __slots__ = ("rows", "cols", "result_sha256")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    RESULT_SHA256_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    result_sha256: bytes
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ..., result_sha256: _Optional[bytes] = ...) -> None: ...

class ReleaseChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: ReleaseHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[ReleaseHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("job_id", "closed", "released", "clients_held", "batches", "bytes_received", "bytes_sent", "store_seconds", "release_seconds", "clipping_check")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_HELD_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    STORE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CLIPPING_CHECK_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    closed: bool
    released: bool
    clients_held: int
    batches: int
    bytes_received: int
    bytes_sent: int
    store_seconds: float
    release_seconds: float
    clipping_check: str
    def __init__(self, job_id: _Optional[str] = ..., closed: _Optional[bool] = ..., released: _Optional[bool] = ..., clients_held: _Optional[int] = ..., batches: _Optional[int] = ..., bytes_received: _Optional[int] = ..., bytes_sent: _Optional[int] = ..., store_seconds: _Optional[float] = ..., release_seconds: _Optional[float] = ..., clipping_check: _Optional[str] = ...) -> None: ...

class SignedStatement(_message.Message):
    __slots__ = ("payload", "signature", "certificate")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    signature: bytes
    certificate: bytes
    def __init__(self, payload: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., certificate: _Optional[bytes] = ...) -> None: ...

class CheckSeedRequest(_message.Message):
    __slots__ = ("job_id", "job_digest")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ...) -> None: ...

class SubmitCheckSeedsRequest(_message.Message):
    __slots__ = ("job_id", "job_digest", "seeds")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    seeds: _containers.RepeatedCompositeFieldContainer[SignedStatement]
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ..., seeds: _Optional[_Iterable[_Union[SignedStatement, _Mapping]]] = ...) -> None: ...

class SubmitCheckOutputsRequest(_message.Message):
    __slots__ = ("job_id", "job_digest", "outputs")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    outputs: _containers.RepeatedCompositeFieldContainer[SignedStatement]
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ..., outputs: _Optional[_Iterable[_Union[SignedStatement, _Mapping]]] = ...) -> None: ...

class CheckVerdict(_message.Message):
    __slots__ = ("passed", "failing_parties", "reason")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    FAILING_PARTIES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    failing_parties: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, passed: _Optional[bool] = ..., failing_parties: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("spec_json", "fit_json", "deadline_s", "randomness")
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    FIT_JSON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    RANDOMNESS_FIELD_NUMBER: _ClassVar[int]
    spec_json: bytes
    fit_json: str
    deadline_s: float
    randomness: str
    def __init__(self, spec_json: _Optional[bytes] = ..., fit_json: _Optional[str] = ..., deadline_s: _Optional[float] = ..., randomness: _Optional[str] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "job_digest", "state", "phase", "error", "submitted_at", "close_at", "release_sha256", "progress_json")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    CLOSE_AT_FIELD_NUMBER: _ClassVar[int]
    RELEASE_SHA256_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_JSON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    state: str
    phase: str
    error: str
    submitted_at: float
    close_at: float
    release_sha256: str
    progress_json: str
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ..., state: _Optional[str] = ..., phase: _Optional[str] = ..., error: _Optional[str] = ..., submitted_at: _Optional[float] = ..., close_at: _Optional[float] = ..., release_sha256: _Optional[str] = ..., progress_json: _Optional[str] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ...) -> None: ...

class GetResultRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetResultResponse(_message.Message):
    __slots__ = ("job_id", "release_sha256", "files")
    class FilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RELEASE_SHA256_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    release_sha256: str
    files: _containers.ScalarMap[str, str]
    def __init__(self, job_id: _Optional[str] = ..., release_sha256: _Optional[str] = ..., files: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec_json",)
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    spec_json: bytes
    def __init__(self, spec_json: _Optional[bytes] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id", "job_digest")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_DIGEST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_digest: str
    def __init__(self, job_id: _Optional[str] = ..., job_digest: _Optional[str] = ...) -> None: ...

class RunJobRequest(_message.Message):
    __slots__ = ("job_id", "deadline_s", "model", "lam", "rank", "no_debias", "randomness")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LAM_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    NO_DEBIAS_FIELD_NUMBER: _ClassVar[int]
    RANDOMNESS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    deadline_s: float
    model: str
    lam: float
    rank: int
    no_debias: bool
    randomness: str
    def __init__(self, job_id: _Optional[str] = ..., deadline_s: _Optional[float] = ..., model: _Optional[str] = ..., lam: _Optional[float] = ..., rank: _Optional[int] = ..., no_debias: _Optional[bool] = ..., randomness: _Optional[str] = ...) -> None: ...

class RunJobResponse(_message.Message):
    __slots__ = ("job_id", "report_json")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REPORT_JSON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    report_json: str
    def __init__(self, job_id: _Optional[str] = ..., report_json: _Optional[str] = ...) -> None: ...

class GetReleaseRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetReleaseResponse(_message.Message):
    __slots__ = ("job_id", "rows", "cols", "matrix_f64", "release_sha256", "privacy_json")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    MATRIX_F64_FIELD_NUMBER: _ClassVar[int]
    RELEASE_SHA256_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_JSON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rows: int
    cols: int
    matrix_f64: bytes
    release_sha256: str
    privacy_json: str
    def __init__(self, job_id: _Optional[str] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ..., matrix_f64: _Optional[bytes] = ..., release_sha256: _Optional[str] = ..., privacy_json: _Optional[str] = ...) -> None: ...

class FitRequest(_message.Message):
    __slots__ = ("job_id", "model", "lam", "rank", "no_debias")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LAM_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    NO_DEBIAS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    model: str
    lam: float
    rank: int
    no_debias: bool
    def __init__(self, job_id: _Optional[str] = ..., model: _Optional[str] = ..., lam: _Optional[float] = ..., rank: _Optional[int] = ..., no_debias: _Optional[bool] = ...) -> None: ...

class FitResponse(_message.Message):
    __slots__ = ("model_json",)
    MODEL_JSON_FIELD_NUMBER: _ClassVar[int]
    model_json: str
    def __init__(self, model_json: _Optional[str] = ...) -> None: ...
