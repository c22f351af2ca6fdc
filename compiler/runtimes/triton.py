"""Triton (tritonserver) on the host's model repository (data/triton.json).

It loads every model the repository defines for the unit's model (llmapi: the model; engine:
the ensemble and the four models beside it, the BLS model included, which no ensemble step
loads). An engine of tp * pp > 1 ranks runs one tritonserver per rank under mpirun, as
upstream's launch_triton_server.py (data: multi_rank, with its source): the TensorRT-LLM
backend is in leader mode over the MPI world, whose size must be tp * pp; rank 0 serves, the
others load the engine model only.
"""

from __future__ import annotations

from compiler.serving import layout
from compiler.serving.layout import ENGINE_PARTS, engine_names

from .base import ServingRuntime, Unit


class Triton(ServingRuntime):
    name = "triton"
    data_file = "triton.json"

    def loaded_models(self, unit: Unit) -> list[str]:
        """The Triton models a unit loads: every model the repository defines for its model."""
        if unit.target == "engine":
            names = engine_names(unit.model)
            return [names["ensemble"], *(names[p] for p in ENGINE_PARTS)]
        return [unit.model]

    def ranks(self, unit: Unit) -> int:
        return unit.tp * unit.pp if unit.target == "engine" else 1

    def command(self, unit: Unit) -> list[str]:
        p = unit.ports
        command = ["tritonserver", f"--model-repository={layout.REPOSITORY_DIR}", "--model-control-mode=explicit",
                   *(f"--load-model={m}" for m in self.loaded_models(unit)),
                   f"--http-port={p['http']}", f"--grpc-port={p['grpc']}", f"--metrics-port={p['metrics']}"]
        ranks = self.ranks(unit)
        if ranks > 1:
            command = self.mpi_command(command, engine_names(unit.model)["tensorrt_llm"], ranks)
        return command

    def mpi_command(self, rank0: list[str], engine_model: str, ranks: int) -> list[str]:
        """One tritonserver per rank under mpirun (multi_rank): rank 0 as given, the others
        loading only the engine model; every rank with its own Python-backend shared-memory prefix."""
        rule = self.data["multi_rank"]
        command = list(rule["launcher"])
        for rank in range(ranks):
            argv = rank0 if rank == 0 else [
                a for a in rank0 if not a.startswith("--load-model=")] + [f"--load-model={engine_model}"]
            if rank:
                command.append(rule["separator"])
            command += [*rule["per_rank"], *argv, *(f.replace("{rank}", str(rank)) for f in rule["every_rank"])]
        return command

    def rank_commands(self, command: list[str]) -> list[list[str]]:
        """The tritonserver command line of each rank: the command itself, or each one mpirun starts."""
        rule = self.data["multi_rank"]
        if command[:len(rule["launcher"])] != rule["launcher"]:
            return [command]
        out: list[list[str]] = [[]]
        for word in command[len(rule["launcher"]):]:
            if word == rule["separator"]:
                out.append([])
            else:
                out[-1].append(word)
        per = len(rule["per_rank"])
        return [argv[per:] if argv[:per] == rule["per_rank"] else argv for argv in out]

    def files(self, unit: Unit) -> list[str]:
        return [f"{layout.REPOSITORY_DIR}/{m}/config.pbtxt" for m in self.loaded_models(unit)]


RUNTIME = Triton()
