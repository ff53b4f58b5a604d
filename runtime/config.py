"""Job settings: checkpointing, restart strategies, transport. Every setter
validates at once and names the setting at fault."""

from __future__ import annotations

import enum
import os
import tempfile
from dataclasses import dataclass, field

from runtime.errors import InvalidConfigurationError

DEFAULT_MAX_PARALLELISM = 128
MAX_MAX_PARALLELISM = 32768


class CheckpointingMode(enum.Enum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class RuntimeExecutionMode(enum.Enum):
    """How a job runs (PyFlink's ``pyflink.datastream.RuntimeExecutionMode``).

    ``STREAMING`` (the default): records flow as they come, keyed reduces emit
    every update, watermarks come from the strategies, periodic checkpoints as
    configured. ``BATCH``: only for jobs whose every source is bounded; each
    keyed reduce emits one final value per key at the end of input, the
    watermark is perfect (none until ``MAX_WATERMARK`` at the end: watermark
    generators are ignored, timestamp assigners still stamp), processing time
    does not advance for timers (every timer fires at the end of input), there
    are no periodic checkpoints, and a failure restarts the job from its start,
    while sinks publish at its end. ``AUTOMATIC``: ``BATCH`` when every source
    is bounded, else ``STREAMING``."""

    STREAMING = "STREAMING"
    BATCH = "BATCH"
    AUTOMATIC = "AUTOMATIC"


def default_checkpoint_storage() -> str:
    """A folder of this user's in the temp folder, readable by no one else: the temp
    folder is shared, and checkpoints are a trust boundary (anyone who can plant
    a checkpoint there chooses what a job restores). A folder by that name that
    another user owns is refused."""
    folder = os.path.join(tempfile.gettempdir(), f"weir-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.stat(folder, follow_symlinks=False)
    if st.st_uid != os.getuid() or not os.path.isdir(folder) or os.path.islink(folder):
        raise InvalidConfigurationError(
            "default checkpoint storage", folder,
            f"is not a folder of this user's (owner uid {st.st_uid}, this user {os.getuid()}): someone sharing the "
            "temp folder could read or plant checkpoints there; choose a folder of yours with set_checkpoint_storage()",
        )
    os.chmod(folder, 0o700)
    return "file://" + os.path.join(folder, "checkpoints")


def validate_storage_uri(uri: str, setting: str = "checkpoint storage") -> str:
    """Resolve ``uri`` with pyarrow.fs now, so a typo fails at configuration time."""
    from pyarrow import fs

    if "://" not in uri:
        uri = "file://" + os.path.abspath(uri)
    try:
        fs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError with its own words
        raise InvalidConfigurationError(setting, uri, f"pyarrow.fs cannot open it ({exc})") from None
    return uri


def _positive(setting: str, value: float, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidConfigurationError(setting, value, "must be a number")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidConfigurationError(setting, value, "must be " + ("zero or more" if allow_zero else "positive"))


def _whole(setting: str, value: int, allow_zero: bool = False) -> int:
    """A count or a number of milliseconds: a fraction would truncate (0.5 ms to 0)."""
    _positive(setting, value, allow_zero)
    if value != int(value):
        raise InvalidConfigurationError(setting, value, "must be a whole number")
    return int(value)


@dataclass
class CheckpointConfig:
    """Periodic checkpointing. ``interval_ms=None`` means off; a bounded job still
    takes one final checkpoint when its sources finish, so two-phase-commit sinks
    commit their last data."""

    interval_ms: int | None = None
    timeout_ms: int = 60_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    retained: int = 1
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    storage: str = field(default_factory=default_checkpoint_storage)
    tolerable_failures: int | None = None

    @property
    def enabled(self) -> bool:
        return self.interval_ms is not None

    def set_checkpoint_interval(self, interval_ms: int) -> "CheckpointConfig":
        self.interval_ms = _whole("checkpoint interval_ms", interval_ms)
        return self

    def set_checkpoint_timeout(self, timeout_ms: int) -> "CheckpointConfig":
        self.timeout_ms = _whole("checkpoint timeout_ms", timeout_ms)
        return self

    def set_min_pause_between_checkpoints(self, min_pause_ms: int) -> "CheckpointConfig":
        self.min_pause_ms = _whole("checkpoint min_pause_ms", min_pause_ms, allow_zero=True)
        return self

    def set_max_concurrent_checkpoints(self, max_concurrent: int) -> "CheckpointConfig":
        self.max_concurrent = _whole("max_concurrent_checkpoints", max_concurrent)
        return self

    def set_num_retained_checkpoints(self, retained: int) -> "CheckpointConfig":
        self.retained = _whole("num_retained_checkpoints", retained)
        return self

    def set_checkpointing_mode(self, mode: CheckpointingMode) -> "CheckpointConfig":
        if not isinstance(mode, CheckpointingMode):
            raise InvalidConfigurationError("checkpointing mode", mode, "use CheckpointingMode.EXACTLY_ONCE or AT_LEAST_ONCE")
        self.mode = mode
        return self

    def set_checkpoint_storage(self, uri: str) -> "CheckpointConfig":
        self.storage = validate_storage_uri(uri)
        return self

    # PyFlink's name for the same setting.
    set_checkpoint_storage_dir = set_checkpoint_storage

    def set_tolerable_checkpoint_failure_number(self, count: int) -> "CheckpointConfig":
        self.tolerable_failures = _whole("tolerable_checkpoint_failures", count, allow_zero=True)
        return self


@dataclass(frozen=True)
class RestartStrategy:
    """How often and how soon a failed job restarts from its latest checkpoint.

    Use the constructors: :meth:`fixed_delay`, :meth:`exponential_delay`, :meth:`no_restart`.
    """

    max_attempts: int
    initial_delay_s: float
    backoff_multiplier: float = 1.0
    max_delay_s: float = 0.0

    @staticmethod
    def fixed_delay(restart_attempts: int = 3, delay_s: float = 1.0) -> "RestartStrategy":
        restart_attempts = _whole("restart_attempts", restart_attempts, allow_zero=True)
        _positive("restart delay_s", delay_s, allow_zero=True)
        return RestartStrategy(int(restart_attempts), float(delay_s), 1.0, float(delay_s))

    @staticmethod
    def exponential_delay(
        max_attempts: int = 10, initial_delay_s: float = 0.5, multiplier: float = 2.0, max_delay_s: float = 30.0
    ) -> "RestartStrategy":
        max_attempts = _whole("restart max_attempts", max_attempts, allow_zero=True)
        _positive("restart initial_delay_s", initial_delay_s, allow_zero=True)
        if multiplier < 1:
            raise InvalidConfigurationError("restart multiplier", multiplier, "must be at least 1")
        _positive("restart max_delay_s", max_delay_s, allow_zero=True)
        return RestartStrategy(int(max_attempts), float(initial_delay_s), float(multiplier), float(max_delay_s))

    @staticmethod
    def no_restart() -> "RestartStrategy":
        return RestartStrategy(0, 0.0)

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before restart number ``attempt`` (1-based)."""
        delay = self.initial_delay_s * self.backoff_multiplier ** (attempt - 1)
        return min(delay, self.max_delay_s) if self.max_delay_s else delay


# Flink's spelling, for users who come from PyFlink.
RestartStrategies = RestartStrategy


@dataclass
class TransportConfig:
    """Batching and flow control of the channels between tasks."""

    # Records per channel buffer before it is sent. 1,024 small records (~12 KB
    # pickled, like Flink's 32 KB network buffers) stay in the CPU's caches: W1
    # cost 20% less CPU per record than with 4,096, side by side on 2 cores.
    batch_size: int = 1024
    buffer_timeout_ms: int = 5      # a non-empty buffer is sent at the latest after this
    mailbox_capacity: int = 4       # queued deliveries per input channel before senders block


@dataclass
class ExecutionConfig:
    parallelism: int = 1
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    task_cpus: float = 0.1  # Ray CPUs per task actor: 20 tasks fit on 2 cores
    placement: str = "spread"  # spread task actors over nodes, or pack them
    failover_strategy: str = "region"  # restart a failed task's pipelined region, or "full": every task
    restart_strategy: RestartStrategy = field(default_factory=lambda: RestartStrategy.fixed_delay(3, 0.5))
    transport: TransportConfig = field(default_factory=TransportConfig)
    watermark_interval_ms: int = 200         # how often sources emit watermarks
    restore_from: str | None = None          # a savepoint or retained checkpoint to start from
    allow_non_restored_state: bool = False   # drop its state of operators the job no longer has
    slot_request_timeout_ms: int = 300_000   # how long a deployment waits for room on the cluster (Flink's slot.request.timeout)
    runtime_mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING  # as set; the job graph has it resolved

    # PyFlink's ``env.get_config()`` setters and getters.
    def set_parallelism(self, parallelism: int) -> "ExecutionConfig":
        self.parallelism = _whole("parallelism", parallelism)
        return self

    def get_parallelism(self) -> int:
        return self.parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "ExecutionConfig":
        self.max_parallelism = _whole("max_parallelism", max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self.max_parallelism

    def set_auto_watermark_interval(self, interval: int) -> "ExecutionConfig":
        """How often sources and ``assign_timestamps_and_watermarks`` emit watermarks, in ms (default 200)."""
        self.watermark_interval_ms = _whole("auto watermark interval_ms", interval)
        return self

    def get_auto_watermark_interval(self) -> int:
        return self.watermark_interval_ms
