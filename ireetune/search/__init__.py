"""Search: candidate records, lazy enumeration with z3, and ordering."""
