"""Policy templates per axis. Importing the package registers every template, the
decision-tree ones (which sit on top of the axes' modules) included."""

from blis_simpy.policies import tree as tree
