"""Observations → actions: :mod:`.policy` acts with the default MLP in numpy on the CPU
(:mod:`.numpy_inference`, :mod:`.default_mlp`: no torch imported) or with a torch module
(:mod:`.torch_model`, :mod:`.models`); :mod:`.device` picks the device, :mod:`.distributions`
samples the actions. No Redis, no environments.
"""
