"""A short, bounded run of the atheris decoder target (fuzz/fuzz_decoder.py).

Longer runs: `python fuzz/fuzz_decoder.py -max_total_time=600`.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

TARGET = pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "fuzz_decoder.py"


def test_the_decoder_survives_twenty_thousand_fuzzed_inputs(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, str(TARGET), "-runs=20000", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Done 20000 runs" in result.stderr
