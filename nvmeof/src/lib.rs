//! `quarry-nvmeof`: an NVMe over Fabrics target (NVMe/TCP first).
