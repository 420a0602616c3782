"""A checkpoint's copy of the live state, made so that the loop barely pauses for it: into host buffers
kept from save to save (no fresh allocation, whose page faults cost more than the copy itself), pinned
where the state is on a GPU, the device's part copied on a stream of its own (as torchtitan's
``async_with_pinned_mem`` does). The loop's next kernels wait for that copy on the device, not on the
host; the thread that writes the file waits for it (:meth:`Staged.ready`) before reading the buffers.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

Path = tuple[Any, ...]  # where a tensor sits in the state (its keys and indices)


@dataclass
class Staged:
    """The state's copy, and how to wait until its buffers hold it."""

    value: Any
    ready: Callable[[], None] = lambda: None


@dataclass
class Staging:
    """The buffers, kept across saves (one copy of the state, for the run's life), and a copy stream
    per GPU."""

    buffers: dict[Path, torch.Tensor] = field(default_factory=dict)
    streams: dict[torch.device, Any] = field(default_factory=dict)

    def copy(self, value: Any) -> Staged:
        """``value`` with each tensor replaced by its buffer. The host's tensors are copied now; a GPU's
        on its copy stream, after what the loop queued, and before what it queues next."""
        pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        staged = self._walk(value, (), pending)
        on_gpu: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for buffer, source in pending:
            if source.is_cuda:
                on_gpu.setdefault(source.device, []).append((buffer, source))
            else:
                buffer.copy_(source)
        events = [self._copy_on_stream(device, copies) for device, copies in on_gpu.items()]

        def ready() -> None:
            for event in events:
                event.synchronize()

        return Staged(staged, ready)

    def _copy_on_stream(self, device: torch.device, copies: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
        stream = self.streams.get(device)
        if stream is None:
            stream = self.streams[device] = torch.cuda.Stream(device)
        loop = torch.cuda.current_stream(device)
        stream.wait_stream(loop)  # the state as the loop's queued work leaves it
        with torch.cuda.stream(stream):
            for buffer, source in copies:
                buffer.copy_(source, non_blocking=True)
                source.record_stream(stream)  # not reused by the allocator before the copy has read it
        event = stream.record_event()
        loop.wait_stream(stream)  # the next update of these tensors comes after the copy, on the device
        return event

    def _walk(self, value: Any, path: Path, pending: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
        if isinstance(value, torch.Tensor):
            return self._buffer_for(value.detach(), path, pending)
        if isinstance(value, dict):
            return {key: self._walk(item, (*path, key), pending) for key, item in value.items()}
        if isinstance(value, list | tuple):
            items = [self._walk(item, (*path, index), pending) for index, item in enumerate(value)]
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # a namedtuple
        return value

    def _buffer_for(
        self, source: torch.Tensor, path: Path, pending: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        plain = type(source) in (torch.Tensor, nn.Parameter) and source.layout == torch.strided
        if not plain or not source.is_contiguous():  # a subclass, a sparse or strided view: copied as it is
            return source.to("cpu", copy=True)
        buffer = self.buffers.get(path)
        if buffer is None or buffer.shape != source.shape or buffer.dtype != source.dtype:
            buffer = torch.empty(source.shape, dtype=source.dtype, pin_memory=source.is_cuda)
            self.buffers[path] = buffer
        pending.append((buffer, source))
        return buffer
