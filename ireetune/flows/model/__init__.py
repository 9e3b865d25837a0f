"""One model run: the run object, its phases in order, and the two modes that run them."""
