"""HTTP/2 protocol work per cache hit, alone: no sockets, no TLS, no event loop, no hit decisions.

    taskset -c 1 .venv/bin/python -m benchmarks.h2_codec_micro [--requests 2000] [--rounds 5]

Per hit, a server connection takes a client's HEADERS frame for a GET (h2load's fields, HPACK state
carried from request to request as a real client's is) and a connection WINDOW_UPDATE (a reading
client's), encodes a response HEADERS block of the edge's usual fields (13 with ``:status``; Date and
X-Request-ID never indexed), sends the body in DATA frames (5 KB: one frame; 100 KB: seven, at the
default 16 KB frame size) and ends the stream; the bytes it made are collected as a socket write would.
The client's frames are made once, before timing (by the ``h2`` library as a client).

Candidates, each timed in the same process:

- ``h2``: the pure-Python ``h2``/``hpack`` libraries (the edge's https port today);
- ``ngh2``: PyPI ``ngh2`` (libnghttp2's session, bundled in its wheel; compiled bindings);
- ``cffi-hpack``: Debian's libnghttp2 (libnghttp2-14) through cffi in ABI mode, HPACK only
  (``nghttp2_hd_inflate_hd2``/``nghttp2_hd_deflate_hd``), frames read and written here with ``struct``:
  the least a hand-written stack would do, with none of the state machine, validation or limits.

Printed: microseconds of CPU (process time) per hit, median and best of the rounds, per candidate and
body size, with the load average. A candidate that cannot be imported is reported and skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import time
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import h2.settings

from benchmarks.measure import load_average

SIZES = {"5 KB": 5 * 1024, "100 KB": 100 * 1024}
BIG_WINDOW = 2**30 - 1
REQUEST = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost:8443"),
           (b":path", b"/bench/asset.bin"), (b"user-agent", b"h2load nghttp2/1.52.0"),
           (b"accept", b"*/*"), (b"accept-encoding", b"gzip, deflate")]
# The edge's hit head (assetcdn/edge/fastpath/prepared.py), lowercased; Date, Age-like and the id vary.
RESPONSE_FIXED = [(b"content-type", b"application/octet-stream"), (b"etag", b'"5d41402abc4b2a76b9719d911017c592"'),
                  (b"cache-tag", b"zone-1"), (b"x-content-type-options", b"nosniff"),
                  (b"cache-control", b"public, max-age=31536000, immutable"), (b"x-cache", b"HIT"),
                  (b"accept-ranges", b"bytes"), (b"x-api-version", b"1"), (b"server", b"assetcdn")]
VARYING = (b"date", b"x-request-id")
Run = Callable[[bytes, list[bytes], bytes], int]


def client_frames(count: int) -> tuple[bytes, list[bytes]]:
    """(preface + SETTINGS + connection WINDOW_UPDATE, one HEADERS + WINDOW_UPDATE per request)."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.local_settings = h2.settings.Settings(client=True, initial_values={
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: BIG_WINDOW})
    client.initiate_connection()
    client.increment_flow_control_window(BIG_WINDOW - 65535)
    start = client.data_to_send()
    frames = []
    for index in range(count):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, REQUEST, end_stream=True)
        headers = client.data_to_send()
        # The connection window a reading client gives back as the body arrives (once per answer).
        update = b"\x00\x00\x04\x08\x00" + struct.pack(">II", 0, 9 * 1024 + index % 2)
        frames.append(headers + update)
    return start, frames


def response_headers(index: int, size: int) -> list[tuple[bytes, bytes]]:
    return [(b":status", b"200"), *RESPONSE_FIXED, (b"content-length", b"%d" % size),
            (b"date", b"Mon, 02 Nov 2026 10:00:%02d GMT" % (index % 60)),
            (b"x-request-id", b"%032x" % (0x5EED0000 + index))]


# --- h2 -----------------------------------------------------------------------------------------------

def run_h2(start: bytes, frames: list[bytes], body: bytes) -> int:
    from hpack import NeverIndexedHeaderTuple
    config = h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=True,
                                       validate_outbound_headers=False, normalize_outbound_headers=False)
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    conn.receive_data(start)
    out = len(conn.data_to_send())
    frame_size = conn.max_outbound_frame_size
    for index, frame in enumerate(frames):
        for event in conn.receive_data(frame):
            if isinstance(event, h2.events.RequestReceived):
                stream_id = event.stream_id
                headers = [NeverIndexedHeaderTuple(n, v) if n in VARYING else (n, v)
                           for n, v in response_headers(index, len(body))]
                conn.send_headers(stream_id, headers)
                view = memoryview(body)
                for offset in range(0, len(body), frame_size):
                    conn.send_data(stream_id, view[offset:offset + frame_size])
                conn.end_stream(stream_id)
        out += len(conn.data_to_send())
    return out


# --- ngh2 ---------------------------------------------------------------------------------------------

def run_ngh2(start: bytes, frames: list[bytes], body: bytes) -> int:
    import ngh2
    conn = ngh2.Connection(ngh2.Role.SERVER, ngh2.Configuration(auto_window_update=False))
    conn.initiate_connection({ngh2.Setting.MAX_CONCURRENT_STREAMS: 100})
    conn.receive_data(start)
    conn.events()
    out = len(conn.data_to_send())
    never = ngh2.NeverIndexedHeader
    request = ngh2.RequestReceived
    for index, frame in enumerate(frames):
        conn.receive_data(frame)
        for event in conn.events():
            if type(event) is request:
                stream_id = event.stream_id
                headers = [never(n, v) if n in VARYING else (n, v) for n, v in response_headers(index, len(body))]
                conn.send_response(stream_id, headers)
                conn.send_data(stream_id, body, end_stream=True)
        out += len(conn.data_to_send())
    return out


# --- cffi: libnghttp2's HPACK, frames by hand -----------------------------------------------------------

CDEF = """
typedef struct { uint8_t *name; uint8_t *value; size_t namelen; size_t valuelen; uint8_t flags; } nghttp2_nv;
typedef struct nghttp2_hd_deflater nghttp2_hd_deflater;
typedef struct nghttp2_hd_inflater nghttp2_hd_inflater;
int nghttp2_hd_deflate_new(nghttp2_hd_deflater **deflater_ptr, size_t max_deflate_dynamic_table_size);
void nghttp2_hd_deflate_del(nghttp2_hd_deflater *deflater);
ssize_t nghttp2_hd_deflate_hd(nghttp2_hd_deflater *deflater, uint8_t *buf, size_t buflen, const nghttp2_nv *nva,
                              size_t nvlen);
int nghttp2_hd_inflate_new(nghttp2_hd_inflater **inflater_ptr);
void nghttp2_hd_inflate_del(nghttp2_hd_inflater *inflater);
ssize_t nghttp2_hd_inflate_hd2(nghttp2_hd_inflater *inflater, nghttp2_nv *nv_out, int *inflate_flags,
                               const uint8_t *in, size_t inlen, int in_final);
int nghttp2_hd_inflate_end_headers(nghttp2_hd_inflater *inflater);
"""
FLAG_NO_INDEX = 1
INFLATE_EMIT = 2
INFLATE_FINAL = 1


def run_cffi_hpack(start: bytes, frames: list[bytes], body: bytes) -> int:
    import cffi  # type: ignore[import-untyped]
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    lib = ffi.dlopen("libnghttp2.so.14")
    deflater_ptr = ffi.new("nghttp2_hd_deflater **")
    inflater_ptr = ffi.new("nghttp2_hd_inflater **")
    if lib.nghttp2_hd_deflate_new(deflater_ptr, 4096) or lib.nghttp2_hd_inflate_new(inflater_ptr):
        raise MemoryError
    deflater, inflater = deflater_ptr[0], inflater_ptr[0]
    nv_out = ffi.new("nghttp2_nv *")
    flags = ffi.new("int *")
    block = ffi.new("uint8_t[]", 16384)
    unpack_header = struct.Struct(">I").unpack_from
    pack_head = struct.Struct(">HBBBI").pack  # length (24 bits as H + B), type, flags, stream id
    window = {0: BIG_WINDOW}
    out = len(start)  # SETTINGS and its ACK, not timed further
    frame_size = 16384
    for index, data in enumerate(frames):
        pos = 0
        while pos < len(data):
            length = unpack_header(data, pos)[0] >> 8
            kind, frame_flags = data[pos + 3], data[pos + 4]
            stream_id = unpack_header(data, pos + 5)[0] & 0x7FFFFFFF
            payload = data[pos + 9:pos + 9 + length]
            pos += 9 + length
            if kind == 8:  # WINDOW_UPDATE
                window[stream_id] = window.get(stream_id, 0) + (unpack_header(payload)[0] & 0x7FFFFFFF)
                continue
            if kind != 1 or not frame_flags & 4:  # HEADERS, END_HEADERS (no CONTINUATION here)
                continue
            fields = []
            buf = ffi.from_buffer(payload)
            left = len(payload)
            while True:
                used = lib.nghttp2_hd_inflate_hd2(inflater, nv_out, flags, buf, left, 1)
                if used < 0:
                    raise ValueError("HPACK")
                buf += used
                left -= used
                if flags[0] & INFLATE_EMIT:
                    nv = nv_out[0]
                    fields.append((ffi.buffer(nv.name, nv.namelen)[:], ffi.buffer(nv.value, nv.valuelen)[:]))
                if flags[0] & INFLATE_FINAL:
                    lib.nghttp2_hd_inflate_end_headers(inflater)
                    break
                if not left and not flags[0] & INFLATE_EMIT:
                    break
            headers = response_headers(index, len(body))
            keep = []
            nva = ffi.new("nghttp2_nv[]", len(headers))
            for i, (name, value) in enumerate(headers):
                cname, cvalue = ffi.from_buffer(name), ffi.from_buffer(value)
                keep.append((cname, cvalue))
                nv = nva[i]
                nv.name, nv.value, nv.namelen, nv.valuelen = cname, cvalue, len(name), len(value)
                nv.flags = FLAG_NO_INDEX if name in VARYING else 0
            size = lib.nghttp2_hd_deflate_hd(deflater, block, 16384, nva, len(headers))
            if size < 0:
                raise ValueError("HPACK")
            chunks = [pack_head(size >> 8, size & 0xFF, 1, 4, stream_id), ffi.buffer(block, size)[:]]
            view = memoryview(body)
            for offset in range(0, len(body), frame_size):
                piece = view[offset:offset + frame_size]
                end = 1 if offset + frame_size >= len(body) else 0
                chunks.append(pack_head(len(piece) >> 8, len(piece) & 0xFF, 0, end, stream_id))
                chunks.append(piece)
                window[0] -= len(piece)
            out += sum(map(len, chunks))
    lib.nghttp2_hd_deflate_del(deflater)
    lib.nghttp2_hd_inflate_del(inflater)
    return out


CANDIDATES: dict[str, Run] = {"h2": run_h2, "ngh2": run_ngh2, "cffi-hpack": run_cffi_hpack}


def measure(run: Run, start: bytes, frames: list[bytes], body: bytes) -> float:
    """Microseconds of this process's CPU per hit."""
    began = time.process_time()
    run(start, frames, body)
    return (time.process_time() - began) / len(frames) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    affinity = sorted(os.sched_getaffinity(0))
    print(f"# h2_codec_micro: {time.strftime('%Y-%m-%d %H:%M')}, cores {affinity}, load average {load_average()}")
    start, frames = client_frames(args.requests)
    usable: dict[str, Run] = {}
    for name, run in CANDIDATES.items():
        try:
            run(start, frames[:4], b"x")
        except (ImportError, OSError, AttributeError) as exc:
            print(f"# {name}: not available ({exc})")
            continue
        usable[name] = run
    results: dict[tuple[str, str], list[float]] = {}
    for round_index in range(args.rounds):
        for size_name, size in SIZES.items():
            body = os.urandom(size)
            for name, run in usable.items():
                results.setdefault((name, size_name), []).append(measure(run, start, frames, body))
        print(f"# round {round_index + 1} done; load average {load_average()}", flush=True)
    print("| candidate | body | us per hit (median) | best | vs h2 |")
    print("|---|---|---:|---:|---:|")
    for size_name in SIZES:
        anchor = statistics.median(results[("h2", size_name)]) if ("h2", size_name) in results else 0.0
        for name in usable:
            runs = results[(name, size_name)]
            median = statistics.median(runs)
            ratio = f"{anchor / median:.1f}x" if anchor else "-"
            print(f"| {name} | {size_name} | {median:.1f} | {min(runs):.1f} | {ratio} |")
    print(f"# done; load average {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
