SFT = 0
RM = 1
PPO = 2
RSFT = 3
DPO = 4
