"""Fill in everything a scenario leaves to defaults that depend on other values.

The catalog supplies GPU, TP and vLLM version per model, then blackbox coefficients and the KV
size per (model, GPU, TP, version), exactly as the reference resolves them (engine.md §7).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from blis_simpy.config.catalog import (
    CATALOG_BLOCK_SIZE,
    DEFAULT_KV_BLOCKS,
    CatalogEntry,
    bundled,
    bundled_model_config,
    read_json,
)
from blis_simpy.config.kv_tiers import block_bytes, resolve_tiers
from blis_simpy.config.memory import (
    GPU_MEMORY_UTILIZATION,
    gpu_memory_mib,
    memory_kv_blocks,
    rank_weight_bytes,
)
from blis_simpy.config.scenario import EngineConfig, LatencyConfig, ModelConfig, Scenario
from blis_simpy.config.step_models import DEFAULT_FAMILY
from blis_simpy.config.workload import DistributionWorkload
from blis_simpy.core.errors import ScenarioError, closest_first
from blis_simpy.core.schema import load, to_plain

if TYPE_CHECKING:
    from blis_simpy.config.deployment import DeploymentConfig, DeploymentSection, ModelDeployment
    from blis_simpy.config.pd import Disaggregation, PoolSpec

# The GPU a physical-model scenario runs on when neither it nor the catalog names one.
NATIVE_GPU = "H100"
# How far above what fits in memory a catalog's KV size may be before native mode replaces it.
KV_TOLERANCE = 0.10


def resolve(scenario: Scenario) -> Scenario:
    """The same scenario with every derived default made explicit."""
    if scenario.deployment is not None:
        scenario = dataclasses.replace(scenario, deployment=resolve_deployment(scenario))
    latency = dataclasses.replace(scenario.latency, type=latency_type(scenario))
    model = scenario.model
    defaults = bundled().model_defaults(model.name)
    model = dataclasses.replace(
        model,
        gpu=model.gpu or defaults.get("GPU") or (NATIVE_GPU if latency.type == "physical"
                                                 else None),
        tp=model.tp or defaults.get("tensor_parallelism"),
        vllm_version=model.vllm_version or defaults.get("vllm_version"),
    )
    if latency.type == "physical" and model.tp is None:
        model = dataclasses.replace(model, tp=default_tp(model, latency))
    engine = scenario.engine
    kv_blocks = engine.kv_blocks
    if latency.type == "blackbox" and (latency.alpha is None or latency.beta is None):
        entry = catalog_entry(model)
        latency = dataclasses.replace(
            latency, alpha=latency.alpha or list(entry.alpha), beta=latency.beta or list(entry.beta)
        )
        kv_blocks = kv_blocks or catalog_kv_blocks(entry, engine.block_size, scenario.compat,
                                                   memory_blocks(model, latency,
                                                                 engine.block_size) or None)
    if latency.type == "roofline":
        latency = dataclasses.replace(latency, alpha=latency.alpha or [0.0, 0.0, 0.0])
        if not kv_blocks and scenario.compat != "blis":  # the reference keeps its 1,000,000
            kv_blocks = fitting_blocks(model, latency, engine.block_size)
    if latency.type == "physical":
        latency = dataclasses.replace(latency,
                                      coefficients=latency.coefficients or DEFAULT_FAMILY)
        kv_blocks = kv_blocks or fitting_blocks(model, latency, engine.block_size)
    kv_blocks = kv_blocks or DEFAULT_KV_BLOCKS
    speculative = engine.speculative
    if speculative is not None and speculative.method == "draft_model" and not engine.kv_blocks:
        from blis_simpy.config.speculation import draft_model_config, kv_blocks_with_draft

        kv_blocks = kv_blocks_with_draft(kv_blocks, model_config_of(model, latency),
                                         draft_model_config(speculative), engine.block_size)
    engine = dataclasses.replace(engine, kv_blocks=kv_blocks)
    if engine.kv_tiers.enabled:
        engine = dataclasses.replace(engine, kv_tiers=resolve_tiers(
            engine.kv_tiers, model_config_of(model, latency), model.tp or 1, engine.block_size,
            "engine.kv_tiers"))
    workload = scenario.workload
    if isinstance(workload, DistributionWorkload) and workload.arrival is None:
        arrival: Literal["poisson", "constant"] = (
            "constant" if scenario.compat == "blis" else "poisson")
        workload = dataclasses.replace(workload, arrival=arrival)
    return dataclasses.replace(scenario, model=model, latency=latency, engine=engine,
                               workload=workload)


def latency_type(scenario: Scenario) -> Literal["blackbox", "roofline", "physical"]:
    """The step model a scenario that names none runs: the reference's blackbox in compat
    mode and wherever alpha or beta coefficients are given, else the physical model."""
    latency = scenario.latency
    if latency.type is not None:
        chosen = latency.type
    elif scenario.compat == "blis" or latency.alpha is not None or latency.beta is not None:
        chosen = "blackbox"
    else:
        chosen = "physical"
    if chosen == "physical" and scenario.compat == "blis":
        raise ScenarioError("latency.type", "the physical model is native; compat: blis runs "
                            "the reference's models", "blackbox, roofline")
    if latency.coefficients is not None and chosen != "physical":
        raise ScenarioError("latency.coefficients", f"is used by the physical model only, and "
                            f"this scenario runs {chosen}", "type: physical, no alpha/beta")
    return chosen


def catalog_kv_blocks(entry: CatalogEntry, block_size: int, compat: str,
                      memory: int | None = None) -> int:
    """The catalog's KV size, measured in blocks of `CATALOG_BLOCK_SIZE` tokens, converted to
    blocks of this engine's size so that a different `block_size` keeps the GPU's capacity in
    tokens. The reference takes the block count as is (its capacity in tokens grows with the
    block size); compat keeps that, and the run warns about it. Native mode checks the
    entry against the GPUs' memory (`memory`, in blocks of `block_size`): an entry more than
    `KV_TOLERANCE` above what fits beside the weights is replaced by what fits, and the run
    warns (`kv_catalog_note`)."""
    if compat == "blis":
        return entry.kv_blocks
    blocks = max(1, entry.kv_blocks * CATALOG_BLOCK_SIZE // block_size)
    if memory is not None and blocks > memory * (1 + KV_TOLERANCE):
        return memory
    return blocks


def kv_catalog_note(scenario: Scenario) -> str | None:
    """The warning of a native run whose catalog KV size was replaced by what fits in memory."""
    model, latency, engine = scenario.model, scenario.latency, scenario.engine
    if scenario.compat == "blis" or latency.type != "blackbox" or model.gpu is None \
            or model.tp is None or model.vllm_version is None:
        return None
    entry = bundled().find(model.name, model.gpu, model.tp, model.vllm_version)
    if entry is None:
        return None
    listed = max(1, entry.kv_blocks * CATALOG_BLOCK_SIZE // engine.block_size)
    memory = memory_blocks(model, latency, engine.block_size)
    if memory is None or listed <= memory * (1 + KV_TOLERANCE) or engine.kv_blocks != memory:
        return None
    return (f"KV cache: the catalog lists {listed:,} blocks for {model.name} on {model.tp} x "
            f"{model.gpu}, but only {memory:,} fit in the GPUs' memory beside the weights "
            f"(vLLM's gpu_memory_utilization 0.9); the run uses {memory:,} (set "
            "engine.kv_blocks to override)")


def default_tp(model: Any, latency: Any) -> int:
    """The fewest GPUs (1, 2, 4, 8) whose memory holds the weights with at least a quarter of
    it left for the KV cache; 8 if none does (the step model then reports the shortfall as
    too small a KV cache)."""
    config = model_config_of(model, latency)
    if config is None or model.gpu is None:
        return 1
    for tp in (1, 2, 4, 8):
        if fits(config, model.gpu, tp, latency, model.dp):
            return tp
    return 8


def fits(config: dict, gpu: str, tp: int, latency: Any, dp: int = 1) -> bool:
    """Whether a data-parallel rank's weights (config/memory.py) leave a quarter of its `tp`
    GPUs' usable memory for the KV cache."""
    try:
        hardware = native_hardware(latency)
    except ValueError:
        return True
    memory = gpu_memory_mib(gpu, hardware)
    weights = rank_weight_bytes(config, dp)
    if memory is None or weights is None:
        return True
    usable = tp * memory * (1 << 20) * GPU_MEMORY_UTILIZATION
    return weights <= 0.75 * usable


def model_config_of(model: Any, latency: Any) -> dict | None:
    """The model's config.json (the roofline's, else the bundled one); None if unreadable."""
    try:
        config = (read_json(latency.model_config, "config.json") if latency.model_config
                  else bundled_model_config(model.name))
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def kv_block_bytes(scenario: Scenario) -> int:
    """Bytes of one KV block on one GPU of the model's TP group; 0 if the config is unknown."""
    config = model_config_of(scenario.model, scenario.latency)
    size = block_bytes(config, scenario.model.tp or 1, scenario.engine.block_size) if config \
        else None
    return size or 0


def kv_layers(scenario: Scenario) -> int:
    """The model's layers (each holds its own slice of a KV block); 1 if the config is
    unknown."""
    config = model_config_of(scenario.model, scenario.latency) or {}
    text = config.get("text_config")
    layers = ({**config, **text} if isinstance(text, dict) else config).get("num_hidden_layers")
    return layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 \
        else 1


def memory_blocks(model: Any, latency: Any, block_size: int) -> int | None:
    """The KV blocks that fit in the GPUs' memory beside the weights (config/memory.py);
    None when that cannot be worked out, including an unreadable model or hardware config,
    which the step model reports when it is built."""
    config = model_config_of(model, latency)
    if model.gpu is None or config is None:
        return None
    try:
        hardware = native_hardware(latency)
    except ValueError:
        return None
    return memory_kv_blocks(config, model.gpu, model.tp or 1, block_size, hardware,
                            model.dp)


def fitting_blocks(model: Any, latency: Any, block_size: int) -> int | None:
    """The KV blocks of a step model that sizes the cache from memory; a model whose weights
    leave no room for one block is refused (it used to run on the 1,000,000-block default,
    a server that could not have started)."""
    blocks = memory_blocks(model, latency, block_size)
    if blocks == 0:
        gpus = f"{model.tp or 1} x {model.gpu}" + (f" per rank, {model.dp} ranks"
                                                   if model.dp > 1 else "")
        raise ScenarioError("model.tp", f"{model.name}'s weights leave no room for a KV "
                            f"block on {gpus}: it does not fit (vLLM would not start)",
                            "a larger model.tp (model.dp for a mixture of experts), a GPU "
                            "with more memory, or engine.kv_blocks to simulate it anyway")
    return blocks


def native_hardware(latency: Any) -> dict | None:
    """The scenario's native hardware file (None: the bundled one); a roofline in compat
    mode reads the reference's format, which has no memory figures."""
    if not latency.hardware_config or latency.type == "blackbox":
        return None
    return read_json(latency.hardware_config, None)


def catalog_entry(model: Any) -> CatalogEntry:
    catalog = bundled()
    if model.name.lower() not in catalog.models():
        raise ScenarioError(
            "model.name", f"{model.name!r} has no coefficients in the catalog (give "
            "latency.alpha and latency.beta, or use latency.type: roofline)",
            ", ".join(closest_first(model.name, catalog.models())))
    missing = [k for k in ("gpu", "tp", "vllm_version") if getattr(model, k) is None]
    if missing:
        raise ScenarioError(
            f"model.{missing[0]}", f"is needed to look up {model.name!r} in the coefficient "
            "catalog, which has no default for this model (or give latency.alpha and "
            "latency.beta, or use latency.type: roofline)",
            "models with defaults: " + ", ".join(catalog.models()),
        )
    entry = catalog.find(model.name, model.gpu, model.tp, model.vllm_version)
    if entry is None or len(entry.alpha) < 3 or len(entry.beta) < 3:
        combinations = list(catalog.combinations(model.name))
        known = [f"{gpu} tp={tp} {version}" for gpu, tp, version in combinations]
        valid = "; ".join(closest_first(f"{model.gpu} tp={model.tp} {model.vllm_version}",
                                        known))
        raise ScenarioError(
            unmatched(model, combinations), f"no blackbox coefficients for {model.name!r} on "
            f"{model.gpu} tp={model.tp} {model.vllm_version} (or give latency.alpha and "
            "latency.beta, or use latency.type: roofline)", valid,
        )
    return entry


def unmatched(model: Any, combinations: list[tuple[Any, Any, Any]]) -> str:
    """The model field to blame for a catalog miss: the version when the GPU and TP have
    coefficients under another, the TP when the GPU has some at another TP, else the GPU."""
    gpus = [(str(gpu).lower(), tp) for gpu, tp, _ in combinations]
    if (str(model.gpu).lower(), model.tp) in gpus:
        return "model.vllm_version"
    if any(gpu == str(model.gpu).lower() for gpu, _ in gpus):
        return "model.tp"
    return "model.gpu"


def config_scenario(scenario: Scenario, model: ModelDeployment, config: DeploymentConfig
                    ) -> Scenario:
    """The one-model scenario a deployment config's replicas run: its model, GPU and TP, and
    its own latency and engine sections where it gives them. A config of the default model
    (`model:`) takes the GPU, TP and vLLM version it leaves out from there."""
    top = scenario.model
    same = top.name.lower() == model.name.lower()
    return dataclasses.replace(
        scenario, deployment=None,
        model=dataclasses.replace(
            top if same else ModelConfig(model.name), name=model.name,
            gpu=config.gpu or (top.gpu if same else None),
            tp=config.tp or (top.tp if same else None),
            vllm_version=model.vllm_version or (top.vllm_version if same else None)),
        latency=scenario.latency if config.latency is None
        else load(LatencyConfig, config.latency, "latency"),
        engine=scenario.engine if config.engine is None
        else load(EngineConfig, config.engine, "engine"))


def pool_config(config: DeploymentConfig, pool: PoolSpec) -> DeploymentConfig:
    """A P/D pool as a deployment config of its own: what the pool gives over the config's."""
    return dataclasses.replace(
        config, gpu=pool.gpu or config.gpu, tp=pool.tp or config.tp,
        latency=config.latency if pool.latency is None else pool.latency,
        engine=config.engine if pool.engine is None else pool.engine, pd=None,
        architecture="monolithic")


def resolve_pools(scenario: Scenario, model: ModelDeployment, config: DeploymentConfig,
                  pd: Disaggregation, path: str) -> Disaggregation:
    """Both P/D pools resolved like configs of their own, written back explicitly."""
    pools, own = {}, {}
    for role in ("prefill", "decode"):
        pool = getattr(pd, role)
        try:
            own[role] = resolve(config_scenario(scenario, model, pool_config(config, pool)))
        except ScenarioError as exc:
            raise ScenarioError(f"{path}.pd.{role}", exc.text) from None
        pools[role] = dataclasses.replace(pool, gpu=own[role].model.gpu, tp=own[role].model.tp,
                                          latency=to_plain(own[role].latency),
                                          engine=to_plain(own[role].engine))
    size = own["prefill"].engine.block_size
    if own["decode"].engine.block_size != size:
        raise ScenarioError(f"{path}.pd.decode.engine.block_size", f"differs from the prefill "
                            f"pool's {size}: KV blocks move between them as they are",
                            str(size))
    if kv_block_bytes(own["prefill"]) <= 0:
        raise ScenarioError(f"{path}.pd.link", f"the bytes of a KV block of {model.name} are "
                            "unknown (no model config), so transfers cannot be timed",
                            "a model with a bundled config, or latency.model_config")
    return dataclasses.replace(pd, **pools)


def resolve_deployment(scenario: Scenario) -> DeploymentSection:
    """Every config resolved as its own one-model scenario would be (catalog GPU, TP,
    coefficients, KV size), written back explicitly; errors name the config."""
    section = scenario.deployment
    assert section is not None
    models = []
    for i, model in enumerate(section.models):
        configs = []
        for j, config in enumerate(model.configs):
            try:
                own = resolve(config_scenario(scenario, model, config))
            except ScenarioError as exc:
                raise ScenarioError(f"deployment.models[{i}].configs[{j}]",
                                    exc.text) from None
            resolved = dataclasses.replace(
                config, gpu=own.model.gpu, tp=own.model.tp, latency=to_plain(own.latency),
                engine=to_plain(own.engine))
            pd = config.disaggregation
            if pd is not None:
                resolved = dataclasses.replace(resolved, pd=resolve_pools(
                    scenario, model, config, pd, f"deployment.models[{i}].configs[{j}]"))
            if section.node_pools:
                resolved = placed(section, resolved, f"deployment.models[{i}].configs[{j}]")
            configs.append(resolved)
        models.append(dataclasses.replace(model, configs=configs,
                                          vllm_version=own.model.vllm_version))
    return dataclasses.replace(section, models=models)


def placed(section: DeploymentSection, config: DeploymentConfig, path: str
           ) -> DeploymentConfig:
    """A resolved config with its node pool made explicit: the pool it names or the only one
    with its GPU type, whose nodes hold a whole replica (each P/D pool's, with its own GPU and
    TP)."""
    from blis_simpy.config.node_pools import pool_for

    shapes = [(config.gpu, config.tp, path)]
    if config.pd is not None:
        shapes = [(getattr(config.pd, role).gpu, getattr(config.pd, role).tp,
                   f"{path}.pd.{role}") for role in ("prefill", "decode")]
    pool = None
    for gpu, tp, where in shapes:
        pool = pool_for(section.node_pools, config.node_pool, gpu or "", path)
        if (tp or 1) > pool.gpus_per_node:
            raise ScenarioError(f"{where}.tp", f"a replica takes {tp} GPUs and a node of pool "
                                f"{pool.id!r} has {pool.gpus_per_node}",
                                f"at most {pool.gpus_per_node}, or a pool of larger nodes")
    assert pool is not None
    return dataclasses.replace(config, node_pool=pool.id)
