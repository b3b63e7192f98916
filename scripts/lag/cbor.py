"""A minimal CBOR for the Smithy RPC v2 CBOR wire (CloudWatch)."""

from __future__ import annotations

import struct
import uuid


# A minimal CBOR (RFC 8949) for the Smithy RPC v2 CBOR wire (CloudWatch): what the Rust SDK
# sends (maps of indefinite length, tag 1 epoch timestamps, float64) and what it reads.
class CborTag:
    def __init__(self, tag: int, value):
        self.tag, self.value = tag, value


def cbor_decode(data: bytes):
    def head(i):
        ib = data[i]
        major, info = ib >> 5, ib & 0x1F
        i += 1
        if info < 24:
            return major, info, i
        if info == 31:
            return major, None, i
        n = {24: 1, 25: 2, 26: 4, 27: 8}[info]
        return major, (info, int.from_bytes(data[i:i + n], "big")), i + n

    def item(i):
        ib = data[i]
        major, arg, j = head(i)
        if major == 7:
            info = ib & 0x1F
            if info == 25:
                return struct.unpack(">e", data[i + 1:i + 3])[0], i + 3
            if info == 26:
                return struct.unpack(">f", data[i + 1:i + 5])[0], i + 5
            if info == 27:
                return struct.unpack(">d", data[i + 1:i + 9])[0], i + 9
            if info == 31:
                raise ValueError("unexpected break")
            return {20: False, 21: True, 22: None, 23: None}.get(info), j
        n = arg[1] if isinstance(arg, tuple) else arg
        if major == 0:
            return n, j
        if major == 1:
            return -1 - n, j
        if major in (2, 3):
            if n is None:
                chunks = []
                while data[j] != 0xFF:
                    c, j = item(j)
                    chunks.append(c)
                return ("" if major == 3 else b"").join(chunks), j + 1
            raw = data[j:j + n]
            return (raw.decode() if major == 3 else raw), j + n
        if major == 4:
            out = []
            if n is None:
                while data[j] != 0xFF:
                    v, j = item(j)
                    out.append(v)
                return out, j + 1
            for _ in range(n):
                v, j = item(j)
                out.append(v)
            return out, j
        if major == 5:
            out = {}
            while (data[j] != 0xFF) if n is None else len(out) < n:
                k, j = item(j)
                v, j = item(j)
                out[k] = v
            return out, (j + 1 if n is None else j)
        if major == 6:
            v, j = item(j)
            return (v if n == 1 else CborTag(n, v)), j
        raise ValueError(f"CBOR major type {major}")

    value, _ = item(0)
    return value


def cbor_encode(v) -> bytes:
    def head(major: int, n: int) -> bytes:
        if n < 24:
            return bytes([major << 5 | n])
        for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
            if n < 1 << (8 * size):
                return bytes([major << 5 | info]) + n.to_bytes(size, "big")
        raise ValueError("integer too large")

    if v is None:
        return b"\xf6"
    if v is True:
        return b"\xf5"
    if v is False:
        return b"\xf4"
    if isinstance(v, CborTag):
        return head(6, v.tag) + cbor_encode(v.value)
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, float):
        return b"\xfb" + struct.pack(">d", v)
    if isinstance(v, str):
        raw = v.encode()
        return head(3, len(raw)) + raw
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, (list, tuple)):
        return head(4, len(v)) + b"".join(cbor_encode(x) for x in v)
    if isinstance(v, dict):
        return head(5, len(v)) + b"".join(cbor_encode(k) + cbor_encode(x) for k, x in v.items())
    raise ValueError(f"cannot encode {type(v).__name__} as CBOR")


def cbor_answer(doc: dict, status: int = 200, query_error: str | None = None) -> tuple[int, list, bytes]:
    headers = [("Content-Type", "application/cbor"), ("smithy-protocol", "rpc-v2-cbor"),
               ("x-amzn-RequestId", str(uuid.uuid4()))]
    if query_error:
        headers.append(("x-amzn-query-error", query_error))
    return status, headers, cbor_encode(doc)


def epoch_of(v) -> float | None:
    if isinstance(v, CborTag):
        v = v.value
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
