"""ddpgui: launch, watch and compare PyTorch DDP experiments on your own or rented GPU machines."""
__version__ = "0.1.0"
