"""The run record's job graph comes from the running workflow: the graph `snakemake --dag` prints, no second plan."""

import subprocess
import sys
from pathlib import Path

SNAKEFILE = """
from pipeline_lib.core.run_info import write_run_info

onstart:
    write_run_info(config, workflow.dag.dot())

rule all:
    input: expand("b{i}.txt", i=range(2))

rule a:
    output: "a{i}.txt"
    shell: "echo {wildcards.i} > {output}"

rule b:
    input: "a{i}.txt"
    output: "b{i}.txt"
    shell: "cat {input} > {output}"
"""


def _snakemake(directory: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=directory, capture_output=True, text=True,
                          check=True)
    return done.stdout


def test_onstart_records_the_graph_snakemake_dag_prints(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    printed = _snakemake(tmp_path, "--dag", "-n", "--quiet", "all")
    _snakemake(tmp_path, "-c1", "--quiet")
    [record] = (tmp_path / "results" / "run_info").iterdir()
    graph = printed[printed.index("digraph"):].rstrip() + "\n"
    assert (record / "dag.dot").read_text() == graph
    assert graph.count('label = "a\\ni: ') == 2 and graph.count('label = "b"') == 2  # every job of the run
    assert {p.name for p in record.iterdir()} == {"config.yaml", "packages.txt", "dag.dot", "run.json"}
