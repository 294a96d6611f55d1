"""The network client (``strata_kv.net.NetKV``) against a real ``strata
kv serve``: blocks round-trip over several pipelined connections straight
into NumPy arrays and other buffers, in order and whole; misses, short
buffers and error replies leave every connection in step; namespaces stay
apart; and what it stores reads back the same through redis-cli's
protocol (a plain RESP GET) and the same-host fast path.
"""

import os
import socket
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))

from test_fastpath import ROOT, Server, block, named, numpy  # noqa: E402

sys.path.insert(0, str(ROOT / "clients" / "python"))

from strata_kv import StrataKV  # noqa: E402
from strata_kv.net import GET_WINDOW, NetError, NetKV, _command, _pipelined  # noqa: E402


def resp_get(port, key):
    """GET over a fresh socket, parsed by hand: an independent reader."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
        data = b""
        while b"\r\n" not in data:
            data += s.recv(65536)
        head, _, rest = data.partition(b"\r\n")
        n = int(head[1:])
        if n < 0:
            return None
        while len(rest) < n + 2:
            rest += s.recv(65536)
        return rest[:n]


class NetClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(dram="256M")
        cls.port = cls.server.port()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_a_batch_round_trips_over_several_connections_in_order(self):
        # More keys than a pipeline window on each of 3 connections, sizes
        # that straddle the client's read buffer, an empty value.
        n = 3 * GET_WINDOW + 7
        sizes = [(i * 7919) % 200_000 for i in range(n)]
        blocks = [block(i, 3, sizes[i]) for i in range(n)]
        keys = [b"chain-%d" % i for i in range(n)]
        with NetKV(("127.0.0.1", self.port), namespace=b"net-rt", connections=3) as kv:
            self.assertEqual(kv.put(keys, blocks), [True] * n)
            self.assertEqual(kv.batch_exists(keys + [b"absent"] + keys[:3]), n)
            outs = [bytearray(s + 5) for s in sizes]
            self.assertEqual(kv.get_into(keys, outs), sizes)
            for i in range(n):
                self.assertEqual(bytes(outs[i][: sizes[i]]), blocks[i], f"block {i}")
                if sizes[i] >= 16:
                    self.assertEqual(named(outs[i][: sizes[i]]), (i, 3))
            self.assertEqual(kv.get(keys[:5] + [b"absent"]), blocks[:5] + [None])
            self.assertEqual(kv.exists([keys[0], b"absent", keys[-1]]), [True, False, True])

    @unittest.skipIf(numpy is None, "numpy not installed")
    def test_numpy_pages_load_in_place(self):
        with NetKV(f"127.0.0.1:{self.port}", namespace=b"net-np", connections=4) as kv:
            pages = [numpy.full((2, 8, 64), i, dtype=numpy.float16) for i in range(40)]
            keys = [b"page-%d" % i for i in range(40)]
            self.assertEqual(kv.batch_set(keys, pages), [True] * 40)
            dst = numpy.zeros((40, 2, 8, 64), dtype=numpy.float16)
            self.assertEqual(kv.batch_get(keys, list(dst)), [pages[0].nbytes] * 40)
            for i in range(40):
                self.assertTrue(numpy.array_equal(dst[i], pages[i]), f"page {i}")

    def test_misses_short_buffers_and_errors_leave_the_connections_in_step(self):
        with NetKV(("127.0.0.1", self.port), namespace=b"net-err", connections=2) as kv:
            a, b = block(1, 1, 100_000), block(2, 1, 5000)
            kv.put([b"a", b"b"], [a, b])
            outs = [bytearray(100_000), bytearray(10), bytearray(10), bytearray(5000)]
            with self.assertRaises(ValueError):
                kv.get_into([b"a", b"a", b"missing", b"b"], outs)
            # The short buffer's reply was consumed: the next calls see
            # their own replies, on both connections.
            self.assertEqual(bytes(outs[0]), a)
            self.assertEqual(bytes(outs[3]), b)
            self.assertEqual(kv.get_into([b"b", b"missing", b"a"], [bytearray(5000), bytearray(1), bytearray(100_000)]),
                             [5000, None, 100_000])
            with self.assertRaises(ValueError):
                kv.get_into([b"a"], [bytes(100_000)])  # read-only
            # An error reply in the middle of a pipeline (a GET with a
            # wrong argument count) comes back in its place, and the
            # replies after it are still read in order.
            conn = kv._conns[0]
            cmds = [_command("GET", b"a"), _command("GET", b"a", b"b"), _command("GET", b"b")]
            replies = []
            _pipelined(conn, [0, 1, 2], lambda i: cmds[i], lambda i: replies.append(conn.reply()))
            self.assertEqual(replies[0], a)
            self.assertIsInstance(replies[1], NetError)
            self.assertEqual(replies[2], b)
            self.assertEqual(kv.get([b"a", b"b"]), [a, b])
            with self.assertRaises(ValueError):
                kv.put([b"a"], [])

    def test_namespaces_stay_apart_and_other_readers_agree(self):
        with NetKV(("127.0.0.1", self.port), namespace=b"tenant-a", connections=2) as ka, \
             NetKV(("127.0.0.1", self.port), namespace=b"tenant-b", connections=2) as kb, \
             NetKV(("127.0.0.1", self.port), connections=1) as kd:
            ka.put([b"k"], [block(1, 1, 9000)])
            kb.put([b"k"], [block(2, 1, 7000)])
            kd.put([b"plain"], [block(3, 1, 3000)])
            self.assertEqual(named(ka.get([b"k"])[0]), (1, 1))
            self.assertEqual(named(kb.get([b"k"])[0]), (2, 1))
            self.assertEqual(kd.get([b"k"]), [None])
            # A plain RESP reader on the default namespace, and the
            # same-host fast path, read what the network client stored.
            self.assertEqual(resp_get(self.port, b"plain"), block(3, 1, 3000))
            with StrataKV(self.server.sock, namespace=b"tenant-a") as fast:
                self.assertEqual(fast.get([b"k"]), [block(1, 1, 9000)])

    def test_threads_with_their_own_clients_never_see_a_mixed_block(self):
        errors = []

        def writer(w):
            try:
                with NetKV(("127.0.0.1", self.port), namespace=b"net-mt", connections=2) as kv:
                    for v in range(1, 30):
                        kv.put([b"shared-%d" % k for k in range(8)], [block(k, v * 10 + w, 20_000 + k) for k in range(8)])
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        def reader():
            try:
                with NetKV(("127.0.0.1", self.port), namespace=b"net-mt", connections=3) as kv:
                    for _ in range(40):
                        outs = [bytearray(20_008) for _ in range(8)]
                        got = kv.get_into([b"shared-%d" % k for k in range(8)], outs)
                        for k, n in enumerate(got):
                            if n is None:
                                continue
                            if n != 20_000 + k or named(outs[k][:n]) is None or named(outs[k][:n])[0] != k:
                                errors.append(AssertionError(f"key {k}: a block of {n} bytes not whole"))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
        threads += [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
