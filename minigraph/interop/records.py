"""TFRecord framing, the container of TensorBoard event files.

Each record is ``uint64 length | uint32 masked_crc32c(length) | data | uint32
masked_crc32c(data)``, little-endian. CRC32C is the Castagnoli CRC (reflected polynomial
0x82F63B78); TensorFlow stores it *masked*, ``((crc >> 15) | (crc << 17)) + 0xa282ead8``
mod 2**32, so that a CRC over data that itself holds CRCs stays well distributed.
"""

from __future__ import annotations

import struct
from typing import IO

_POLYNOMIAL = 0x82F63B78
_MASK_DELTA = 0xA282EAD8


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLYNOMIAL if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``, the check value)."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The masked CRC TFRecords store."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def framed(data: bytes) -> bytes:
    """One record: ``data`` with its length, the length's CRC and the data's CRC."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


def write_record(file: IO[bytes], data: bytes) -> None:
    """Append one framed record."""
    file.write(framed(data))


def read_records(file: IO[bytes]) -> list[bytes]:
    """Every record of a TFRecord stream, checking both CRCs (a truncated last record, as a
    writer that is still running leaves it, ends the list)."""
    records = []
    while True:
        header = file.read(12)
        if len(header) < 12:
            return records
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != length_crc:
            raise ValueError(f"corrupt record length at byte {file.tell() - 12}")
        data, footer = file.read(length), file.read(4)
        if len(data) < length or len(footer) < 4:
            return records
        if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
            raise ValueError(f"corrupt record data at byte {file.tell() - length - 4}")
        records.append(data)
