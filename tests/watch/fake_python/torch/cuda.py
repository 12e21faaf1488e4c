"""torch.cuda of the fake torch (see torch/__init__.py for the scripted behaviours)."""
import os


class _Properties:
    name = "NVIDIA H100 PCIe"
    uuid = "fa4e0000-0000-0000-0000-000000000000"  # the fake NVML's device 0


def is_available():
    return os.environ.get("FAKE_TORCH_AVAILABLE", "1") == "1" and os.environ.get("FAKE_TORCH_CUDA") != "none"


def get_device_capability(index=0):
    major, minor = os.environ.get("FAKE_TORCH_CAPABILITY", "9.0").split(".")
    return int(major), int(minor)


def get_arch_list():
    return os.environ.get("FAKE_TORCH_ARCHS", "sm_80,sm_90").split(",")


def get_device_name(index=0):
    return _Properties.name


def get_device_properties(index=0):
    return _Properties()


def device_count():
    return 1


def is_bf16_supported():
    return get_device_capability() >= (8, 0)


def synchronize():
    pass
