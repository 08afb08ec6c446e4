"""The stream rules of RFC 9113 that libnghttp2 leaves unchecked, checked on the client's frames before it reads them.

libnghttp2 forgets a stream once it is closed and ignores PRIORITY frames (RFC 9113 deprecates their signals): a
frame on a stream the client has ended or reset, HEADERS on a stream id the client skipped, PRIORITY on stream 0 or
depending on itself would pass unanswered. It also ends the whole connection (GOAWAY FLOW_CONTROL_ERROR) for a
WINDOW_UPDATE that overflows one stream's window, where RFC 9113 6.9.1 asks for that stream's reset.
``FrameGuard`` reads the 9-byte header of every frame on its way to the library (``H2Protocol._receive``,
assetcdn/edge/tls/h2.py), each byte once and in order however the reads split them, and keeps in bounded memory:

- ``last``, the highest stream id the client opened in what the library was given (so also the last stream id of
  the GOAWAY the edge writes when the library stops on the client's input), and ``receiving``, the streams it
  opened and has neither ended (END_STREAM) nor reset. DATA or HEADERS on an odd id up to ``last`` that is not
  receiving is on a closed stream: GOAWAY STREAM_CLOSED (RFC 9113 5.1; after the client's own RST_STREAM a stream
  error, of which a connection error is the stronger form). A second HEADERS on a receiving stream (trailers) is
  the library's.
- ``reset``: streams the server (the edge or the library: refused past the limit, a stream error, a reset answer)
  closed while the client could still send. RFC 9113 5.1 has frames in flight after our RST_STREAM ignored, so
  theirs go to the library, which ignores them. The library says nothing of a refused stream, so ``receiving``
  is swept once it holds more than twice the concurrency limit: a stream the library no longer knows moves to
  ``reset``, which keeps the last RESET_KEPT (a frame on an older one is then taken for a closed stream's).
- ``skipped``: the ids the client passed over when it opened a higher one, closed from idle (RFC 9113 5.1.1):
  HEADERS on one is PROTOCOL_ERROR. The last SKIPPED_KEPT ranges are kept; HEADERS on an id of an older range
  gets STREAM_CLOSED, a connection error all the same.
- PRIORITY on stream 0: GOAWAY PROTOCOL_ERROR (6.3). PRIORITY depending on its own stream: that stream reset with
  PROTOCOL_ERROR (5.3.1), or GOAWAY PROTOCOL_ERROR when the stream is idle (RST_STREAM may not be sent on an idle
  stream, 6.4).
- WINDOW_UPDATE taking an open stream's window past 2^31-1: the stream reset with FLOW_CONTROL_ERROR and the
  frame dropped, once the library has read every frame before it (those set the window it is checked against).

Everything else (frame sizes, CONTINUATION, idle streams, HPACK, the preface) stays the library's. The streams
reset here are counted in ``streams_reset`` for the connection's reset limit (a client that makes the server reset
streams costs what one that resets them does).
"""

from __future__ import annotations

import collections
import struct

import ngh2
from ngh2 import ErrorCode

PREFACE_SIZE = 24          # b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n": checked by the library
HEAD_SIZE = 9
HEAD = struct.Struct(">IBI")  # length (24 bits) and type, flags, reserved bit and stream id
WORD = struct.Struct(">I")
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, WINDOW_UPDATE = 0x0, 0x1, 0x2, 0x3, 0x4, 0x8
END_STREAM = ACK = 0x1
STREAM_ID = 0x7FFFFFFF     # the stream id and PRIORITY's dependency, without their reserved or exclusive bit
MAX_WINDOW = 2**31 - 1
PRIORITY_SIZE = HEAD_SIZE + 5
WINDOW_UPDATE_SIZE = HEAD_SIZE + 4
RESET_KEPT = 1000          # streams reset by the server whose frames in flight are still let through
SKIPPED_KEPT = 16          # ranges of stream ids the client skipped
SWEEP_MIN = 64             # ``receiving`` is swept past twice the stream limit, and never below this


class FrameGuard:
    """The client's frames of one connection, checked on their way to ``connection.receive_data``."""

    __slots__ = ("connection", "skip", "held", "last", "receiving", "reset", "skipped", "sweep_at",
                 "base_sweep", "streams_reset")

    def __init__(self, connection: ngh2.Connection, max_concurrent_streams: int) -> None:
        self.connection = connection
        self.skip = PREFACE_SIZE    # bytes still to pass before the next frame header
        self.held = b""             # a frame's start (header, and the payload read here) that the last read cut
        self.last = -1              # the highest stream id the client opened; -1: none yet
        self.receiving: set[int] = set()
        # In the order they were reset, the oldest dropped once RESET_KEPT are kept: a dict, so the look-up a
        # client can make for every frame it sends (empty DATA on a reset stream) costs the same however many.
        self.reset: dict[int, None] = {}
        self.skipped: collections.deque[tuple[int, int]] = collections.deque(maxlen=SKIPPED_KEPT)
        self.base_sweep = max(2 * max_concurrent_streams, SWEEP_MIN)
        self.sweep_at = self.base_sweep
        self.streams_reset = 0      # reset here since the caller last took the count

    def receive(self, data: bytes) -> ErrorCode | None:
        """Give ``data`` to the library, checking its frames on the way: None, or the error code of the connection
        error found (the frames before it given to the library, the rest not). The library's exceptions pass."""
        if self.held:
            data = self.held + data
            self.held = b""
        connection = self.connection
        size = len(data)
        pos = self.skip  # the next frame header: past the preface, or past a payload begun in an earlier read
        if pos >= size:
            self.skip = pos - size
            connection.receive_data(data)
            return None
        fed = 0          # data[:fed] was given to the library
        dirty = False    # a frame not given yet may change a stream's window (SETTINGS, a new stream)
        raised: dict[int, int] | None = None  # stream id: the WINDOW_UPDATE increments after data[:fed]
        last = self.last
        receiving = self.receiving
        error = None
        while pos + HEAD_SIZE <= size:
            word, flags, stream_id = HEAD.unpack_from(data, pos)
            kind = word & 0xFF
            stream_id &= STREAM_ID
            if kind == HEADERS:
                if stream_id & 1:
                    if stream_id > last:
                        if stream_id > last + 2:
                            self.skipped.append((last + 2, stream_id - 2))
                        last = stream_id
                        if not flags & END_STREAM:
                            receiving.add(stream_id)
                        dirty = True
                    elif stream_id in receiving:  # trailers
                        if flags & END_STREAM:
                            receiving.discard(stream_id)
                    elif stream_id not in self.reset:
                        error = ErrorCode.PROTOCOL_ERROR if self._skipped(stream_id) else ErrorCode.STREAM_CLOSED
                        break
            elif kind == DATA:
                if stream_id & 1 and stream_id <= last:
                    if stream_id in receiving:
                        if flags & END_STREAM:
                            receiving.discard(stream_id)
                    elif stream_id not in self.reset:
                        error = ErrorCode.STREAM_CLOSED
                        break
            elif kind == WINDOW_UPDATE:
                if stream_id and word >> 8 == 4:
                    if pos + WINDOW_UPDATE_SIZE > size:
                        break
                    increment = WORD.unpack_from(data, pos + HEAD_SIZE)[0] & STREAM_ID
                    if increment:
                        # The increments not given to the library yet are added here, so a run of WINDOW_UPDATE
                        # frames is given to it whole, not one frame per call.
                        pending = increment if raised is None else raised.get(stream_id, 0) + increment
                        if dirty or self._window(stream_id) + pending > MAX_WINDOW:
                            # The window is the one the frames before set (or they closed the stream): the
                            # library reads them first.
                            if fed < pos:
                                self.last = last  # the streams the library reads (it may raise)
                                connection.receive_data(memoryview(data)[fed:pos])
                                fed = pos
                            dirty = False
                            raised = None
                            pending = increment
                            if self._window(stream_id) + increment > MAX_WINDOW:
                                self._reset(stream_id, ErrorCode.FLOW_CONTROL_ERROR)
                                fed = pos + WINDOW_UPDATE_SIZE  # the frame is not the library's
                                pending = 0
                        if pending:
                            if raised is None:
                                raised = {}
                            raised[stream_id] = pending
            elif kind == RST_STREAM:
                receiving.discard(stream_id)
            elif kind == PRIORITY:
                if not stream_id:
                    error = ErrorCode.PROTOCOL_ERROR
                    break
                if word >> 8 == 5:
                    if pos + PRIORITY_SIZE > size:
                        break
                    if WORD.unpack_from(data, pos + HEAD_SIZE)[0] & STREAM_ID == stream_id:
                        if stream_id > last or not stream_id & 1:  # idle
                            error = ErrorCode.PROTOCOL_ERROR
                            break
                        if fed < pos:
                            self.last = last
                            connection.receive_data(memoryview(data)[fed:pos])
                        fed = pos + PRIORITY_SIZE
                        self._reset(stream_id, ErrorCode.PROTOCOL_ERROR)
            elif kind == SETTINGS:
                if not flags & ACK:
                    dirty = True
            pos += HEAD_SIZE + (word >> 8)
        self.last = last
        if error is not None:
            end = pos
        elif pos < size:  # a frame's start, cut by the end of the read: checked with the next one
            self.held = data[pos:]
            self.skip = 0
            end = pos
        else:
            self.skip = pos - size
            end = size
        if fed < end:
            connection.receive_data(data if fed == 0 and end == size else memoryview(data)[fed:end])
        if len(receiving) > self.sweep_at:
            self._sweep()
        return error

    def _skipped(self, stream_id: int) -> bool:
        for low, high in self.skipped:
            if low <= stream_id <= high:
                return True
        return False

    def _window(self, stream_id: int) -> int:
        """The stream's send window in the library; 0 for a stream it does not know (closed or idle: its own)."""
        try:
            return self.connection.stream_remote_window_size(stream_id)
        except ngh2.StreamUnavailableError:
            return 0

    def _reset(self, stream_id: int, code: ErrorCode) -> None:
        self.connection.reset_stream(stream_id, code)
        self.streams_reset += 1

    def _sweep(self) -> None:
        """The streams the library no longer knows (refused, or reset by it or by the edge) leave ``receiving``
        for ``reset``: the client may still send on them. Called when the library has read what was checked."""
        connection = self.connection
        reset = self.reset
        for stream_id in list(self.receiving):
            try:
                connection.stream_remote_window_size(stream_id)
            except ngh2.StreamUnavailableError:
                self.receiving.discard(stream_id)
                if len(reset) >= RESET_KEPT:
                    del reset[next(iter(reset))]  # the oldest
                reset[stream_id] = None
        self.sweep_at = max(self.base_sweep, 2 * len(self.receiving))
