"""Op-family knowledge: find the root op of a dispatch and parse it into a typed problem."""
