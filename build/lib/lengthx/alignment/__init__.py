"""Paper A, attention alignment: choosing the softmax temperature τ without training.

- :mod:`~lengthx.alignment.algorithm1`: Algorithm 1 (§4), τ that aligns P_max or entropy with L_tr's;
- :mod:`~lengthx.alignment.propositions`: log scaling (§5) and the closed forms of Propositions 1-2 (§7);
- :mod:`~lengthx.alignment.statistics`: the dispersal statistics they read (§3.3, Tables 1 and 7, Figure 1).
"""
