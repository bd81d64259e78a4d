"""Ways to run a model (strategies): each decides what the solvers get and records a typed decision
in the plan (``base`` says how, ``registry`` lists them; ``modes`` holds the user's words for them,
which the request imports without loading the strategies)."""
