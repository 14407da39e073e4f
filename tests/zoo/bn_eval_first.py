"""torchvision fine-tuning style: a small ResNet-like CNN whose BatchNorm layers are frozen with
.eval() (running statistics kept) right after model.train(), before the first step; crashed
the first optimizer.step() under tm ("OrderedDict mutated during iteration")."""

import torch
import torch.nn as nn
from _common import zoo


def conv_bn(cin, cout, stride):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class SmallNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 8, 1), conv_bn(8, 16, 2))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))


def freeze_bn(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eval()


torch.manual_seed(0)
gen = torch.Generator().manual_seed(0)
model = SmallNet()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
model.train()
freeze_bn(model)

B, epochs, batches = 8, 2, 5
samples, losses = 0, []
for epoch in range(epochs):
    for i in range(batches):
        image = torch.randn(B, 3, 16, 16, generator=gen)
        target = torch.randint(0, 10, (B,), generator=gen)
        output = model(image)
        loss = criterion(output, target)
        samples += image.size(0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        acc1 = (output.argmax(1) == target).float().mean().item() * 100
        print(f"Epoch: [{epoch}] [{i}/{batches}] loss {losses[-1]:.4f} acc@1 {acc1:.1f}")

# Counted FLOPs of the 3rd step, by hand: a convolution is 2 B Cout Cin kh kw Ho Wo FLOPs
# (bias-free); its backward computes the weight's gradient (same count) and the input's (same
# count) only when the input needs one, which the image does not.
#   conv1 3 -> 8, 3x3, 16x16 out: 2*8*8*3*9*256 = 884,736; x2 (weight grad only) = 1,769,472
#   conv2 8 -> 16, 3x3, stride 2, 8x8 out: 2*8*16*8*9*64 = 1,179,648; x3 = 3,538,944
#   fc 16 -> 10: 2*8*16*10 = 2,560; x3 = 7,680      (BatchNorm, ReLU, pooling: not matmuls)
conv1 = 2 * B * 8 * 3 * 9 * 16 * 16
conv2 = 2 * B * 16 * 8 * 9 * 8 * 8
fc = 2 * B * 16 * 10
zoo(
    steps=epochs * batches,
    samples=samples,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=2 * conv1 + 3 * conv2 + 3 * fc,
    attention="none counted",
)
