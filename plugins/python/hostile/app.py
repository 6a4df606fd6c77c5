"""hostile (Python): misbehaves on purpose, to show that the host's limits
hold for Python plugins too. By record value: ``loop`` spins forever,
``alloc`` allocates without bound, ``raise`` raises; anything else is
forwarded."""

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
        out.forward()


Transformer = sluice.export(Hostile)
