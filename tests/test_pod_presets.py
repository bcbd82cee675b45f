"""Pod presets: valid configs whose meshes and batches fit the devices they are written for."""

import math

import pytest

from omnidistill.config import load_config
from omnidistill.parallel.mesh import MeshError, mesh_shape
from omnidistill.train.setup import check_batching

PRESETS = {  # file -> (devices in total, processes)
    "mbert-v5p-32.yaml": (16, 4),
    "mbert-2x-v5p-128.yaml": (128, 32),
    "ettin-32m-8xh100.yaml": (8, 1),
    "deberta-v3-base-2x8xh100.yaml": (16, 2),
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_fits_its_machine(repo_root, name):
    cfg = load_config(repo_root / "configs" / "pods" / name)
    devices, processes = PRESETS[name]
    granules = cfg.mesh.dcn_data * cfg.mesh.dcn_fsdp
    ici = mesh_shape(cfg.mesh, devices // granules)
    assert math.prod(ici) * granules == devices
    batch_shards = ici[0] * ici[1] * granules
    check_batching(cfg, batch_shards, processes)


def test_preset_on_the_wrong_machine_is_a_clear_error(repo_root):
    cfg = load_config(repo_root / "configs" / "pods" / "mbert-v5p-32.yaml")
    with pytest.raises(MeshError, match="data=1 x fsdp=16 x tensor=1 = 16 devices, but 8 are available"):
        mesh_shape(cfg.mesh, 8)
