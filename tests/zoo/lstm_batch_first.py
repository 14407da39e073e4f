"""An LSTM sequence classifier with batch_first=True (inputs (B, T)), as text-classification
tutorials write it: embedding, LSTM, the last time step's output to a Linear head; guards the
LSTM's FLOPs counted (FlopCounterMode has no formula for the CPU LSTM kernel)."""

import torch
import torch.nn as nn
from _common import zoo

V, D, H, C, B, T, STEPS = 100, 12, 20, 5, 6, 14, 10


class LSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(V, D)
        self.lstm = nn.LSTM(D, H, batch_first=True)
        self.fc = nn.Linear(H, C)

    def forward(self, text):
        output, _ = self.lstm(self.embedding(text))
        return self.fc(output[:, -1, :])


torch.manual_seed(0)
gen = torch.Generator().manual_seed(2)
model = LSTMClassifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.CrossEntropyLoss()
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    text = torch.randint(0, V, (B, T), generator=gen)
    label = text[:, 0] % C
    predictions = model(text)
    tokens, samples = tokens + text.numel(), samples + text.size(0)
    loss = criterion(predictions, label)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

# The 3rd step, by hand (a matmul row k -> n is 2 k n FLOPs; backward twice it): the LSTM's
# 4 gates from the input and from h are 2 * 4H (D + H) = 2*80*32 = 5,120 a token, x3 = 15,360,
# over B x T = 84 tokens = 1,290,240; the head runs once per sequence on the last output,
# 2 H C = 200, x3 = 600, x6 sequences = 3,600. Total 1,293,840.
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * 2 * 4 * H * (D + H) * B * T + 3 * 2 * H * C * B,
    attention="none counted",
)
