"""The processes of disaggregated serving on the runtime protocol (compiler/runtimes): each role's
trtllm-serve reads its own options file, and the router's command fits the flag table of
`trtllm-serve disaggregated` with the readiness path its server has."""

from __future__ import annotations

from compiler.catalog import disaggregated as facts
from compiler.runtimes import REGISTRY, ROUTER, Unit, check_argv, flag_value
from compiler.runtimes.trtllm_disaggregated import config_path


def _options(serving) -> str:
    """The options file a trtllm-serve command reads (its data's options flag)."""
    return flag_value(serving.command, REGISTRY["trtllm-serve"].data["options_flag"])


def test_the_router_command_fits_its_flag_table_and_waits_as_long_as_a_unit_loads() -> None:
    serving = ROUTER.serve(Unit(model="chat", target="llmapi", ports={"http": 8000, "grpc": 8001, "metrics": 8002}))
    assert check_argv(ROUTER.data, serving.command) == []
    assert serving.command[:2] == ["trtllm-serve", "disaggregated"]
    assert flag_value(serving.command, "--config_file") == config_path("chat")
    assert int(flag_value(serving.command, "--server_start_timeout")) > facts.fact("router_cli")["defaults"][
        "--server_start_timeout"]
    assert serving.ready == facts.fact("router_cli")["ready"] and serving.listens == [8000]
    assert serving.files == [config_path("chat")]
    # the same facts in both files
    cli = facts.fact("router_cli")
    assert {f for f in ROUTER.data["flags"]} <= set(cli["flags"])


def test_the_router_is_not_a_serving_runtime_choice() -> None:
    assert ROUTER.name not in REGISTRY


def test_each_role_server_reads_its_roles_options() -> None:
    rt = REGISTRY["trtllm-serve"]
    ports = {"http": 8003, "grpc": 8004, "metrics": 8005}
    prefill = rt.serve(Unit(model="chat", target="llmapi", ports=ports, role="prefill"))
    decode = rt.serve(Unit(model="chat", target="llmapi", ports=ports, tp=4, gpus=4, role="decode"))
    assert check_argv(rt.data, prefill.command) == [] and check_argv(rt.data, decode.command) == []
    assert _options(prefill).endswith("/chat/prefill/llm-api-options.yaml")
    assert _options(decode).endswith("/chat/decode/llm-api-options.yaml")
    assert flag_value(decode.command, "--tp_size") == "4"
    plain = rt.serve(Unit(model="chat", target="llmapi", ports=ports))
    assert _options(plain).endswith("/chat/llm-api-options.yaml")


def test_the_example_units_run_their_roles_server() -> None:
    """Each serving unit of a disaggregated model runs trtllm-serve with its role's parallelism and
    options file, on the port after the router's."""
    from pathlib import Path

    from compiler.actions.runtimes import ir_unit_serving
    from compiler.pipeline import validate_path

    ir = validate_path(Path(__file__).resolve().parents[1] / "examples" / "disaggregated" / "kiln.yaml").resolved
    servings = {u.id: ir_unit_serving(ir, u) for u in ir.units}
    prefill, decode = servings["h200/gpu0"], servings["h200/gpu4+5+6+7"]
    assert _options(prefill).endswith("/chat/prefill/llm-api-options.yaml")
    assert _options(decode).endswith("/chat/decode/llm-api-options.yaml")
    assert (flag_value(prefill.command, "--tp_size"), flag_value(decode.command, "--tp_size")) == ("1", "4")
    assert (prefill.port, servings["h200/gpu1"].port, decode.port) == (8003, 8006, 8009)
