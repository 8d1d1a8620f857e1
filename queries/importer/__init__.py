"""Import of EPANET networks (read with WNTR, georeferenced with pyproj) into the queries models."""
