def _unavailable(*_, **__):
    raise RuntimeError("flash_attn is a CPU import stand-in; ring attention needs the real package and CUDA")


index_first_axis = pad_input = rearrange = unpad_input = _unavailable
