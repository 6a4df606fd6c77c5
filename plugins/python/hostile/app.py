"""hostile (Python): misbehaves on purpose, to show that the host's limits
and sandbox hold for Python plugins too. By record value: ``loop`` spins
forever, ``alloc`` allocates without bound, ``raise`` raises; ``read-file``,
``connect`` and ``clock`` try the file system, the network and the clock and
emit what they got; ``print-and-abort`` writes to stderr and aborts (a
trap); anything else is forwarded."""

import os
import socket
import sys
import time

import sluice


class Hostile(sluice.Transform):
    def process(self, record, out):
        command = bytes(record.value)
        if command == b"loop":
            while True:
                pass
        if command == b"alloc":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        if command == b"raise":
            raise RuntimeError("hostile plugin raised on purpose")
        if command == b"read-file":
            try:
                with open("/etc/hostname", "rb") as file:
                    out.emit(b"read: " + file.read())
            except OSError as error:
                out.emit(f"denied: {type(error).__name__}".encode())
            return
        if command == b"connect":
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as connection:
                    connection.connect(("127.0.0.1", 9092))
                out.emit(b"connected")
            except OSError as error:
                out.emit(f"denied: {type(error).__name__}".encode())
            return
        if command == b"print-and-abort":
            print("hostile python says goodbye", file=sys.stderr, flush=True)
            os.abort()
        if command == b"clock":
            out.emit(repr(time.time()).encode())
            return
        out.forward()


Transformer = sluice.export(Hostile)
