"""Tests of the pure-Python part of copus_hook (records, serialisation, file and TCP sinks).
Run with plain python3: ``python3 -m unittest -v test_copus_hook`` from this directory."""

import json
import math
import os
import socket
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import copus_hook as hook  # noqa: E402


def strict_loads(line):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(line, parse_constant=refuse)


class RecordTests(unittest.TestCase):
    def test_minimal_record_has_protocol_fields_only(self):
        rec = hook.make_record(3, 8, 64, 2.5, 0.5)
        self.assertEqual(rec, {"v": 1, "step": 3, "b_small": 8, "b_big": 64,
                               "sq_small": 2.5, "sq_big": 0.5})

    def test_loss_scale_is_divided_out_squared(self):
        rec = hook.make_record(1, 8, 64, 1024.0 * 4, 1024.0, loss_scale=32.0,
                               layers={"w": (64.0, 16.0)})
        self.assertAlmostEqual(rec["sq_small"], 4.0)
        self.assertAlmostEqual(rec["sq_big"], 1.0)
        self.assertEqual(rec["layers"]["w"], {"sq_small": 64 / 1024, "sq_big": 16 / 1024})
        self.assertNotIn("skipped", rec)

    def test_non_finite_steps_are_flagged_and_stay_strict_json(self):
        rec = hook.make_record(2, 8, 64, float("nan"), float("inf"), loss=float("inf"),
                               layers={"a": (1.0, float("-inf"))})
        self.assertIn("non-finite", rec["skipped"])
        for name in ("sq_small", "sq_big", "loss", "a.sq_big"):
            self.assertIn(name, rec["skipped"])
        back = strict_loads(hook.dumps(rec))
        self.assertEqual((back["sq_small"], back["sq_big"]), (0.0, 0.0))
        self.assertNotIn("loss", back)

    def test_impossible_batch_sizes_are_refused(self):
        for b_small, b_big in ((8, 8), (0, 8), (8, 4), (float("nan"), 8)):
            with self.assertRaises(ValueError):
                hook.make_record(0, b_small, b_big, 1.0, 1.0)
        with self.assertRaises(ValueError):
            hook.make_record(0, 1, 2, 1.0, 1.0, loss_scale=0.0)

    def test_optional_fields_round_trip(self):
        rec = hook.make_record(5, 4, 32, 1.0, 0.25, n_small=8, tokens=1e6, loss=2.5, lr=3e-4,
                               step_time_s=0.8, config={"dp": 8, "tp": 1, "pp": 1, "mbs": 4},
                               skipped="loss-scale change")
        back = strict_loads(hook.dumps(rec))
        self.assertEqual(back["n_small"], 8)
        self.assertEqual(back["config"], {"dp": 8, "tp": 1, "pp": 1, "mbs": 4})
        self.assertEqual(back["skipped"], "loss-scale change")
        self.assertTrue(math.isclose(back["lr"], 3e-4))

    def test_importing_the_hook_does_not_import_torch(self):
        self.assertNotIn("torch", sys.modules)


class SinkTests(unittest.TestCase):
    def test_file_sink_flushes_every_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.ndjson")
            with hook.StatsWriter([hook.FileSink(path)]) as w:
                for step in range(3):
                    w.write(hook.make_record(step, 2, 16, 3.0, 1.0))
                    with open(path, encoding="utf-8") as f:  # visible before close
                        self.assertEqual(len(f.read().splitlines()), step + 1)
            with open(path, encoding="utf-8") as f:
                steps = [strict_loads(line)["step"] for line in f]
            self.assertEqual(steps, [0, 1, 2])

    def test_an_earlier_runs_file_is_not_replaced_unless_asked(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.ndjson")
            with hook.open_writer(path=path, rank=0) as w:
                w.write(hook.make_record(0, 2, 16, 3.0, 1.0))
            with self.assertRaises(FileExistsError) as e:
                hook.open_writer(path=path, rank=0)
            self.assertIn("append=True", str(e.exception))
            self.assertIn(path, str(e.exception))
            with hook.open_writer(path=path, rank=0, append=True) as w:  # a resumed job
                w.write(hook.make_record(1, 2, 16, 3.0, 1.0))
            with open(path, encoding="utf-8") as f:
                self.assertEqual([strict_loads(x)["step"] for x in f], [0, 1])
            with hook.open_writer(path=path, rank=0, overwrite=True) as w:
                w.write(hook.make_record(5, 2, 16, 3.0, 1.0))
            with open(path, encoding="utf-8") as f:
                self.assertEqual([strict_loads(x)["step"] for x in f], [5])
            empty = os.path.join(d, "empty.ndjson")
            open(empty, "w").close()  # made by mktemp or a launcher: written as is
            with hook.open_writer(path=empty, rank=0) as w:
                w.write(hook.make_record(0, 2, 16, 3.0, 1.0))
            with self.assertRaises(ValueError):
                hook.FileSink(empty, append=True, overwrite=True)

    def test_other_ranks_write_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.ndjson")
            w = hook.open_writer(path=path, rank=1)
            w.write(hook.make_record(0, 2, 16, 3.0, 1.0))
            w.close()
            self.assertFalse(os.path.exists(path))

    def test_tcp_sink_replays_history_and_streams_to_every_client(self):
        w = hook.open_writer(serve="tcp://:0", rank=0)
        server = w.sinks[0]
        self.assertEqual(server.host, "127.0.0.1")
        try:
            w.write(hook.make_record(0, 2, 16, 3.0, 1.0))
            clients = [socket.create_connection(("127.0.0.1", server.port), timeout=5)
                       for _ in range(2)]
            deadline = time.monotonic() + 5
            while server.clients() < 2:
                self.assertLess(time.monotonic(), deadline, "clients never registered")
                time.sleep(0.01)
            w.write(hook.make_record(1, 2, 16, 3.0, 1.0))
            for c in clients:
                data = b""
                while data.count(b"\n") < 2:
                    chunk = c.recv(4096)
                    self.assertTrue(chunk, "server closed early")
                    data += chunk
                steps = [strict_loads(line)["step"] for line in data.decode().splitlines()]
                self.assertEqual(steps, [0, 1])
                c.close()
        finally:
            w.close()


if __name__ == "__main__":
    unittest.main()
