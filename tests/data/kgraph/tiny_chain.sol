# A legal solution of tiny_chain.kgraph, written by hand (tests/test_contest_cli.py checks its figures):
# every kernel at a slow, small model; max time 576, wirelength 225, score 1 x 576 + 2 x 225 = 1,026.
k1 = conv( 16 16 8 16 3 3 1 1 1 4 8 16 )
k1 : place( 0 0 R0 )
k2 = cblock( 16 16 32 1 2 8 8 8 8 4 4 2 4 )
k2 : place( 48 0 R0 )
k3 = dblock( 8 8 32 1 2 8 8 8 2 4 2 )
k3 : place( 90 0 R0 )
k4 = conv( 8 8 32 32 1 1 2 2 1 1 8 4 )
k4 : place( 48 18 R90 )
k5 = conv( 4 4 32 64 3 3 1 1 1 1 32 16 )
k5 : place( 60 18 R0 )
