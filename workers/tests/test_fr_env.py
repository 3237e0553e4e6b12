"""The flight recorder's variable names for the torch at hand (ddptop_worker/fr_env.py)."""

from __future__ import annotations

from ddptop_worker.fr_env import add_legacy_names



def test_flight_recorder_names_are_copied_for_an_older_torch_only() -> None:
    env = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": "/r/fr_rank"}
    assert add_legacy_names("2.11.0+cu130", env) == []
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env  # 2.11 warns about the old name
    assert add_legacy_names("2.6.0", env) == [
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    ]
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/r/fr_rank"
    # a user's own setting of the old name is left alone
    env = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "5"}
    assert add_legacy_names("2.5.1", env) == []
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "5"
